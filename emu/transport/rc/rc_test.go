package rc

import (
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// RC requester and responder, packet in / packet out, with no device.

var ackOK = roce.SyndromeACKNoCredit

// TestRequesterSegmentation: a message becomes PMTU-sized packets with
// consecutive PSNs, the right first/middle/last opcodes, the RETH on the
// first WRITE packet and AckReq on the last; the ACK of the last PSN
// completes it.
func TestRequesterSegmentation(t *testing.T) {
	tests := []struct {
		name   string
		op     transport.Opcode
		length int
		want   []roce.Opcode
		wc     transport.WCOpcode
	}{
		{"send empty", transport.OpSend, 0, []roce.Opcode{roce.RCSendOnly}, transport.WCSend},
		{"send one packet", transport.OpSend, 100, []roce.Opcode{roce.RCSendOnly}, transport.WCSend},
		{"send exactly two", transport.OpSend, 2 * testPMTU, []roce.Opcode{roce.RCSendFirst, roce.RCSendLast}, transport.WCSend},
		{"send three", transport.OpSend, 2*testPMTU + 88, []roce.Opcode{roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast}, transport.WCSend},
		{"send with immediate", transport.OpSendImm, testPMTU + 1, []roce.Opcode{roce.RCSendFirst, roce.RCSendLastWithImmediate}, transport.WCSend},
		{"write three", transport.OpWrite, 3 * testPMTU, []roce.Opcode{roce.RCRDMAWriteFirst, roce.RCRDMAWriteMiddle, roce.RCRDMAWriteLast}, transport.WCWrite},
		{"write with immediate", transport.OpWriteImm, 10, []roce.Opcode{roce.RCRDMAWriteOnlyWithImmediate}, transport.WCWrite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			data := h.Fill(0, tt.length, 3)
			h.post(transport.SendWR{ID: 42, Opcode: tt.op, Signaled: true, RemoteAddr: 0xAB000, RKey: 0x77, Imm: 0x01020304}, 0, tt.length)
			var want []wantPacket
			for i, op := range tt.want {
				want = append(want, wantPacket{op: op, psn: testSQPSN + uint32(i), ackReq: i == len(tt.want)-1})
			}
			sent := h.Take()
			checkPackets(t, sent, want)
			var payload []byte
			for _, p := range sent {
				if len(p.Payload) > testPMTU {
					t.Errorf("%d-byte payload over a %d-byte PMTU", len(p.Payload), testPMTU)
				}
				payload = append(payload, p.Payload...)
			}
			transporttest.CheckPayload(t, "payload on the wire", payload, data)
			if first := sent[0].Fields; tt.op == transport.OpWrite || tt.op == transport.OpWriteImm {
				if first.RETH != (roce.RETHFields{VA: 0xAB000, RKey: 0x77, DMALength: uint32(tt.length)}) {
					t.Errorf("RETH %+v", first.RETH)
				}
			}
			if last := sent[len(sent)-1].Fields; (tt.op == transport.OpSendImm || tt.op == transport.OpWriteImm) && last.ImmDt != 0x01020304 {
				t.Errorf("ImmDt %#x", last.ImmDt)
			}
			if h.Timer == 0 {
				t.Error("retransmission timer not armed")
			}
			h.receive(ack(testSQPSN+uint32(len(tt.want))-1, ackOK, 1))
			transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 42, Opcode: tt.wc, ByteLen: uint32(tt.length)}})
			if h.Timer != 0 {
				t.Error("timer still armed with nothing outstanding")
			}
		})
	}
}

// TestRequesterAckCoalescing: one cumulative ACK completes every message
// up to its PSN, in order; an ACK in the middle completes only the
// messages before it.
func TestRequesterAckCoalescing(t *testing.T) {
	tests := []struct {
		name    string
		ackPSN  uint32
		done    []uint64
		armed   bool
		resends int
	}{
		{"ack of the last completes all", testSQPSN + 3, []uint64{1, 2, 3}, false, 0},
		{"ack inside the second completes the first", testSQPSN + 1, []uint64{1}, true, 0},
		{"ack of the second completes two", testSQPSN + 2, []uint64{1, 2}, true, 0},
		{"ack of an older PSN completes nothing", testSQPSN - 1, nil, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 0, 10)                 // PSN 500
			h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, testPMTU+1)         // PSNs 501, 502
			h.post(transport.SendWR{ID: 3, Opcode: transport.OpWrite, Signaled: true, RKey: 1}, 0, testPMTU) // PSN 503
			if n := len(h.Take()); n != 4 {
				t.Fatalf("%d packets out, want 4", n)
			}
			h.receive(ack(tt.ackPSN, ackOK, 0))
			var want []transport.Completion
			for _, id := range tt.done {
				wc, n := transport.WCSend, uint32(10)
				if id == 2 {
					n = testPMTU + 1
				}
				if id == 3 {
					wc, n = transport.WCWrite, testPMTU
				}
				want = append(want, transport.Completion{WRID: id, Opcode: wc, ByteLen: n})
			}
			transporttest.CheckCompletions(t, h.Completions(), want)
			if armed := h.Timer != 0; armed != tt.armed {
				t.Errorf("timer armed %v, want %v", armed, tt.armed)
			}
			if n := len(h.Take()); n != tt.resends {
				t.Errorf("%d packets resent, want %d", n, tt.resends)
			}
		})
	}
}

// TestResponderAckCoalescing: the responder acknowledges only where the
// requester asks (AckReq), once per request, with the MSN of the messages
// done; the data lands where the RETH says.
func TestResponderAckCoalescing(t *testing.T) {
	tests := []struct {
		name    string
		packets int
		ackReq  []bool
		acks    []wantPacket
	}{
		{"one ACK for a three-packet WRITE", 3, []bool{false, false, true},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 2, syn: ackOK, msn: 1}}},
		{"AckReq inside the message", 3, []bool{false, true, true}, []wantPacket{
			{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: ackOK, msn: 0},
			{op: roce.RCAcknowledge, psn: testRQPSN + 2, syn: ackOK, msn: 1}}},
		{"no AckReq, no ACK", 2, []bool{false, false}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			data := make([]byte, tt.packets*testPMTU)
			for i := range data {
				data[i] = byte(i * 13)
			}
			for i := 0; i < tt.packets; i++ {
				op := roce.RCRDMAWriteMiddle
				switch i {
				case 0:
					op = roce.RCRDMAWriteFirst
				case tt.packets - 1:
					op = roce.RCRDMAWriteLast
				}
				f := reqPacket(op, testRQPSN+uint32(i), tt.ackReq[i], data[i*testPMTU:(i+1)*testPMTU])
				if i == 0 {
					f.RETH = roce.RETHFields{VA: testVA + 512, RKey: testKey, DMALength: uint32(len(data))}
				}
				h.receive(f)
			}
			checkPackets(t, h.Take(), tt.acks)
			transporttest.CheckPayload(t, "memory after the WRITE", h.BytesAt(512, len(data)), data)
			if len(h.Events) != 0 {
				t.Errorf("events %v", h.Events)
			}
		})
	}
}

// TestNAKSequenceError: the responder NAKs the first packet past a gap
// once, with the PSN it expects; the requester that gets the NAK completes
// what it acknowledges and resends from the NAKed PSN.
func TestNAKSequenceError(t *testing.T) {
	t.Run("responder", func(t *testing.T) {
		tests := []struct {
			name string
			psns []uint32
			want []wantPacket
		}{
			{"gap: one NAK", []uint32{testRQPSN + 1, testRQPSN + 2},
				[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError)}}},
			{"gap then the missing packet", []uint32{testRQPSN + 1, testRQPSN}, []wantPacket{
				{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError)},
				{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}}},
			{"NAK again after progress", []uint32{testRQPSN + 1, testRQPSN, testRQPSN + 2}, []wantPacket{
				{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError)},
				{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1},
				{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError), msn: 1}}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, nil)
				for _, psn := range tt.psns {
					f := reqPacket(roce.RCRDMAWriteOnly, psn, true, []byte{1, 2, 3, 4})
					f.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: 4}
					h.receive(f)
				}
				checkPackets(t, h.Take(), tt.want)
			})
		}
	})
	t.Run("requester", func(t *testing.T) {
		h := newHarness(t, nil)
		h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 0, 10)         // PSN 500
		h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, 2*testPMTU) // PSNs 501, 502
		h.post(transport.SendWR{ID: 3, Opcode: transport.OpSend, Signaled: true}, 0, 10)         // PSN 503
		h.Take()
		h.receive(ack(testSQPSN+2, roce.NAKSyndrome(roce.NAKPSNSequenceError), 1))
		transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 1, Opcode: transport.WCSend, ByteLen: 10}})
		checkPackets(t, h.Take(), []wantPacket{
			{op: roce.RCSendLast, psn: testSQPSN + 2, ackReq: true},
			{op: roce.RCSendOnly, psn: testSQPSN + 3, ackReq: true}})
		if len(h.Events) != 0 {
			t.Errorf("events %v", h.Events)
		}
	})
}

// TestRNR: a SEND with no receive request posted gets an RNR NAK (the QP's
// minimum RNR timer) and is executed once the peer resends it after a
// receive is posted; the requester waits the RNR time, resends, and fails
// the message when its RNR retries are exhausted.
func TestRNR(t *testing.T) {
	t.Run("responder", func(t *testing.T) {
		h := newHarness(t, nil)
		send := reqPacket(roce.RCSendOnly, testRQPSN, true, []byte("hello"))
		h.receive(send)
		checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.RNRNAKSyndrome(testMinRNR)}})
		transporttest.CheckCompletions(t, h.Completions(), nil)
		h.PostRecv(9, 0, 64)
		h.receive(send)
		checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}})
		transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 9, Opcode: transport.WCRecv, ByteLen: 5, Recv: true}})
		transporttest.CheckPayload(t, "received", h.BytesAt(0, 5), []byte("hello"))
	})
	tests := []struct {
		name     string
		rnrRetry uint8
		naks     int
		want     []transport.Completion
		events   []transport.Event
	}{
		{"waits and resends", 2, 1, []transport.Completion{{WRID: 1, Opcode: transport.WCSend, ByteLen: 10}}, nil},
		{"retries exhausted", 1, 2, []transport.Completion{
			{WRID: 1, Opcode: transport.WCSend, Status: transport.StatusRNRRetryExc},
			{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}}, []transport.Event{transport.EventQPRequestErr}},
		{"infinite", rcInfiniteRNR, 20, []transport.Completion{{WRID: 1, Opcode: transport.WCSend, ByteLen: 10}}, nil},
	}
	for _, tt := range tests {
		t.Run("requester "+tt.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.RNRRetry = tt.rnrRetry })
			h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 0, 10)
			h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, 10)
			h.Take()
			for i := 0; i < tt.naks; i++ {
				h.receive(ack(testSQPSN, roce.RNRNAKSyndrome(testMinRNR), 0))
				if h.qp.State() == transport.StateErr {
					break
				}
				if h.Timer != roce.RNRTimer(testMinRNR) {
					t.Fatalf("NAK %d: timer %v, want the RNR time %v", i, h.Timer, roce.RNRTimer(testMinRNR))
				}
				if n := len(h.Take()); n != 0 {
					t.Fatalf("NAK %d: %d packets sent during the RNR wait", i, n)
				}
				h.fire()
				checkPackets(t, h.Take(), []wantPacket{
					{op: roce.RCSendOnly, psn: testSQPSN, ackReq: true},
					{op: roce.RCSendOnly, psn: testSQPSN + 1, ackReq: true}})
			}
			if h.qp.State() != transport.StateErr {
				h.receive(ack(testSQPSN, ackOK, 1))
			}
			done := h.Completions()
			transporttest.CheckCompletions(t, done, tt.want)
			if len(h.Events) != len(tt.events) || (len(tt.events) > 0 && h.Events[0] != tt.events[0]) {
				t.Errorf("events %v, want %v", h.Events, tt.events)
			}
		})
	}
}

// TestRetryExhaustion: each local ACK timeout resends everything
// unacknowledged; after retry_cnt retries the oldest message fails with
// RETRY_EXC_ERR, the QP goes to ERR and the rest is flushed. Progress
// restores the retry budget.
func TestRetryExhaustion(t *testing.T) {
	tests := []struct {
		name     string
		retryCnt uint8
		ackAfter int // timeouts before the peer acknowledges; -1: never
		want     []transport.Completion
		events   []transport.Event
	}{
		{"no retries", 0, -1, []transport.Completion{
			{WRID: 1, Opcode: transport.WCWrite, Status: transport.StatusRetryExc},
			{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}}, []transport.Event{transport.EventQPRequestErr}},
		{"three retries", 3, -1, []transport.Completion{
			{WRID: 1, Opcode: transport.WCWrite, Status: transport.StatusRetryExc},
			{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}}, []transport.Event{transport.EventQPRequestErr}},
		{"acknowledged on the last retry", 2, 2, []transport.Completion{
			{WRID: 1, Opcode: transport.WCWrite, ByteLen: 2 * testPMTU},
			{WRID: 2, Opcode: transport.WCSend, ByteLen: 10}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.RetryCnt = tt.retryCnt })
			h.post(transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true, RKey: 5}, 0, 2*testPMTU) // PSNs 500, 501
			h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, 10)                   // PSN 502
			if n := len(h.Take()); n != 3 {
				t.Fatalf("%d packets, want 3", n)
			}
			if h.Timer != roce.LocalACKTimeout(testTimeout) {
				t.Fatalf("timer %v, want %v", h.Timer, roce.LocalACKTimeout(testTimeout))
			}
			for i := 0; h.qp.State() != transport.StateErr; i++ {
				if i == tt.ackAfter {
					h.receive(ack(testSQPSN+2, ackOK, 2))
					break
				}
				if i > int(tt.retryCnt) {
					t.Fatalf("still retrying after %d timeouts", i)
				}
				h.fire()
				if h.qp.State() == transport.StateErr {
					break
				}
				checkPackets(t, h.Take(), []wantPacket{
					{op: roce.RCRDMAWriteFirst, psn: testSQPSN},
					{op: roce.RCRDMAWriteLast, psn: testSQPSN + 1, ackReq: true},
					{op: roce.RCSendOnly, psn: testSQPSN + 2, ackReq: true}})
			}
			transporttest.CheckCompletions(t, h.Completions(), tt.want)
			if len(h.Events) != len(tt.events) || (len(tt.events) > 0 && h.Events[0] != tt.events[0]) {
				t.Errorf("events %v, want %v", h.Events, tt.events)
			}
		})
	}
}

// TestDuplicateRead: a READ is answered from its responder resource; a
// duplicate READ (a requester that lost responses) replays the responses
// from the PSN it names, with the memory's data, and does not move the
// expected PSN.
func TestDuplicateRead(t *testing.T) {
	const length = 2*testPMTU + 40
	tests := []struct {
		name  string
		psn   uint32 // of the duplicate
		va    uint64
		len   uint32
		want  []wantPacket
		bytes [2]int // the replayed region bytes [from, to)
	}{
		{"whole READ again", testRQPSN, testVA, length, []wantPacket{
			{op: roce.RCRDMAReadResponseFirst, psn: testRQPSN, syn: ackOK, msn: 1},
			{op: roce.RCRDMAReadResponseMiddle, psn: testRQPSN + 1},
			{op: roce.RCRDMAReadResponseLast, psn: testRQPSN + 2, syn: ackOK, msn: 1}}, [2]int{0, length}},
		{"from the second response", testRQPSN + 1, testVA + testPMTU, length - testPMTU, []wantPacket{
			{op: roce.RCRDMAReadResponseMiddle, psn: testRQPSN + 1},
			{op: roce.RCRDMAReadResponseLast, psn: testRQPSN + 2, syn: ackOK, msn: 1}}, [2]int{testPMTU, length}},
		{"outside the original READ", testRQPSN, testVA + 8, length, nil, [2]int{}},
		{"another R_Key", testRQPSN, testVA, length, nil, [2]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			data := h.Fill(0, length, 9)
			read := reqPacket(roce.RCRDMAReadRequest, testRQPSN, true, nil)
			read.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: length}
			h.receive(read)
			first := h.Take()
			checkPackets(t, first, []wantPacket{
				{op: roce.RCRDMAReadResponseFirst, psn: testRQPSN, syn: ackOK, msn: 1},
				{op: roce.RCRDMAReadResponseMiddle, psn: testRQPSN + 1},
				{op: roce.RCRDMAReadResponseLast, psn: testRQPSN + 2, syn: ackOK, msn: 1}})
			dup := reqPacket(roce.RCRDMAReadRequest, tt.psn, true, nil)
			dup.RETH = roce.RETHFields{VA: tt.va, RKey: testKey, DMALength: tt.len}
			if tt.name == "another R_Key" {
				dup.RETH.RKey = testKey + 1
			}
			h.receive(dup)
			replay := h.Take()
			checkPackets(t, replay, tt.want)
			var got []byte
			for _, p := range replay {
				got = append(got, p.Payload...)
			}
			transporttest.CheckPayload(t, "replayed data", got, data[tt.bytes[0]:tt.bytes[1]])
			// The expected PSN is past the READ: the next request executes.
			next := reqPacket(roce.RCRDMAWriteOnly, testRQPSN+3, true, []byte{1})
			next.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: 1}
			h.receive(next)
			checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 3, syn: ackOK, msn: 2}})
		})
	}
}

// TestAtomicReplay: an atomic executes once; a duplicate of it (its ACK
// was lost) gets the saved original value again and does not execute
// twice.
func TestAtomicReplay(t *testing.T) {
	tests := []struct {
		name      string
		op        roce.Opcode
		initial   uint64
		compare   uint64
		swapAdd   uint64
		after     uint64
		duplicate uint32 // PSN of the duplicate
		replayed  bool
	}{
		{"fetch-add", roce.RCFetchAdd, 5, 0, 3, 8, testRQPSN, true},
		{"compare-swap hit", roce.RCCompareSwap, 5, 5, 99, 99, testRQPSN, true},
		{"compare-swap miss", roce.RCCompareSwap, 5, 6, 99, 5, testRQPSN, true},
		{"duplicate of an unknown PSN", roce.RCFetchAdd, 5, 0, 3, 8, testRQPSN - 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			word := h.BytesAt(64, 8)
			binary.LittleEndian.PutUint64(word, tt.initial)
			f := reqPacket(tt.op, testRQPSN, true, nil)
			f.AtomicETH = roce.AtomicETHFields{VA: testVA + 64, RKey: testKey, SwapAdd: tt.swapAdd, Compare: tt.compare}
			h.receive(f)
			want := []wantPacket{{op: roce.RCAtomicAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}}
			sent := h.Take()
			checkPackets(t, sent, want)
			if sent[0].Fields.AtomicAckETH != tt.initial {
				t.Errorf("original value %d, want %d", sent[0].Fields.AtomicAckETH, tt.initial)
			}
			if got := binary.LittleEndian.Uint64(word); got != tt.after {
				t.Fatalf("memory %d after the atomic, want %d", got, tt.after)
			}
			f.BTH.PSN = tt.duplicate
			h.receive(f)
			sent = h.Take()
			if !tt.replayed {
				checkPackets(t, sent, nil)
			} else {
				checkPackets(t, sent, want)
				if sent[0].Fields.AtomicAckETH != tt.initial {
					t.Errorf("replayed original value %d, want %d", sent[0].Fields.AtomicAckETH, tt.initial)
				}
			}
			if got := binary.LittleEndian.Uint64(word); got != tt.after {
				t.Errorf("memory %d after the duplicate, want %d (executed twice)", got, tt.after)
			}
		})
	}
}

// TestRequesterReadAndAtomic: READ responses land in the request's SGEs
// and complete it; an atomic acknowledge writes the original value.
func TestRequesterReadAndAtomic(t *testing.T) {
	h := newHarness(t, nil)
	h.post(transport.SendWR{ID: 1, Opcode: transport.OpRead, Signaled: true, RemoteAddr: 0x5000, RKey: 3}, 0, testPMTU+10)
	h.post(transport.SendWR{ID: 2, Opcode: transport.OpFetchAdd, Signaled: true, RemoteAddr: 0x6000, RKey: 3, CompareAdd: 1}, 1024, 8)
	sent := h.Take()
	checkPackets(t, sent, []wantPacket{
		{op: roce.RCRDMAReadRequest, psn: testSQPSN, ackReq: true},
		{op: roce.RCFetchAdd, psn: testSQPSN + 2, ackReq: true}})
	if sent[0].Fields.RETH != (roce.RETHFields{VA: 0x5000, RKey: 3, DMALength: testPMTU + 10}) {
		t.Errorf("READ RETH %+v", sent[0].Fields.RETH)
	}
	remote := make([]byte, testPMTU+10)
	for i := range remote {
		remote[i] = byte(i)
	}
	first := reqPacket(roce.RCRDMAReadResponseFirst, testSQPSN, false, remote[:testPMTU])
	first.AETH = roce.AETHFields{Syndrome: ackOK}
	h.receive(first)
	last := reqPacket(roce.RCRDMAReadResponseLast, testSQPSN+1, false, remote[testPMTU:])
	last.AETH = roce.AETHFields{Syndrome: ackOK}
	h.receive(last)
	atomicAck := ack(testSQPSN+2, ackOK, 2)
	atomicAck.BTH.Opcode = roce.RCAtomicAcknowledge
	atomicAck.AtomicAckETH = 0x1122334455667788
	h.receive(atomicAck)
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
		{WRID: 1, Opcode: transport.WCRead, ByteLen: testPMTU + 10},
		{WRID: 2, Opcode: transport.WCFetchAdd, ByteLen: 8}})
	transporttest.CheckPayload(t, "READ data", h.BytesAt(0, len(remote)), remote)
	if got := binary.LittleEndian.Uint64(h.BytesAt(1024, 8)); got != 0x1122334455667788 {
		t.Errorf("atomic result %#x", got)
	}
}

// TestStaleRegion: a WRITE whose region is deregistered between its
// packets fails instead of writing the region's old pages (references are
// re-validated on every use).
func TestStaleRegion(t *testing.T) {
	h := newHarness(t, nil)
	first := reqPacket(roce.RCRDMAWriteFirst, testRQPSN, false, make([]byte, testPMTU))
	first.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: 2 * testPMTU}
	h.receive(first)
	delete(h.Regions, mr.Handle(testKey))
	last := make([]byte, testPMTU)
	for i := range last {
		last[i] = 0xEE
	}
	h.receive(reqPacket(roce.RCRDMAWriteLast, testRQPSN+1, true, last))
	checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: roce.NAKSyndrome(roce.NAKRemoteAccessError)}})
	if h.BytesAt(testPMTU, 1)[0] == 0xEE {
		t.Error("the WRITE reached a deregistered region")
	}
	if len(h.Events) != 1 || h.Events[0] != transport.EventQPAccessError {
		t.Errorf("events %v, want QP access error", h.Events)
	}
}

// TestRNRThenSequenceNAK: a responder with no receive answers a packet of
// a pipeline with an RNR NAK and the packets behind it with a PSN sequence
// error NAK for the same PSN (it still expects it); a repeated ACK of an
// earlier PSN may come too. The RNR wait must survive them: its timer stays
// armed with the RNR time, nothing is resent during it and no retry is
// spent; at its end everything from the NAKed PSN is resent. (Before, the
// sequence NAK rewound the requester, found nothing in flight and stopped
// the RNR timer while the wait held sending back: the QP stalled for ever
// with no error, seen with pyverbs under a slow receiver.)
func TestRNRThenSequenceNAK(t *testing.T) {
	rnr := roce.RNRNAKSyndrome(testMinRNR)
	seq := roce.NAKSyndrome(roce.NAKPSNSequenceError)
	tests := []struct {
		name string
		in   []roce.PacketFields // after the ACK of PSN 500 and the RNR NAK of 501
	}{
		{"nothing", nil},
		{"sequence NAK", []roce.PacketFields{ack(testSQPSN+1, seq, 1)}},
		{"sequence NAK twice", []roce.PacketFields{ack(testSQPSN+1, seq, 1), ack(testSQPSN+1, seq, 1)}},
		{"repeated ACK then sequence NAK", []roce.PacketFields{ack(testSQPSN, ackOK, 1), ack(testSQPSN+1, seq, 1)}},
		{"sequence NAK then repeated ACK", []roce.PacketFields{ack(testSQPSN+1, seq, 1), ack(testSQPSN, ackOK, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.RetryCnt = 1 })
			for id := uint64(1); id <= 3; id++ {
				h.post(transport.SendWR{ID: id, Opcode: transport.OpSend, Signaled: true}, 0, 10) // PSNs 500, 501, 502
			}
			h.Take()
			h.receive(ack(testSQPSN, ackOK, 1))
			h.receive(ack(testSQPSN+1, rnr, 1))
			for _, f := range tt.in {
				h.receive(f)
			}
			if h.Timer != roce.RNRTimer(testMinRNR) {
				t.Fatalf("timer %v during the RNR wait, want the RNR time %v", h.Timer, roce.RNRTimer(testMinRNR))
			}
			if got := h.Take(); len(got) != 0 {
				t.Fatalf("%d packets sent during the RNR wait: %v", len(got), describe(got))
			}
			if left := h.qp.Snapshot().RetriesLeft; left != 1 {
				t.Errorf("%d retries left, want the QP's 1: the RNR wait's NAKs cost none", left)
			}
			h.fire()
			checkPackets(t, h.Take(), []wantPacket{
				{op: roce.RCSendOnly, psn: testSQPSN + 1, ackReq: true},
				{op: roce.RCSendOnly, psn: testSQPSN + 2, ackReq: true}})
			h.receive(ack(testSQPSN+2, ackOK, 3))
			transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
				{WRID: 1, Opcode: transport.WCSend, ByteLen: 10},
				{WRID: 2, Opcode: transport.WCSend, ByteLen: 10},
				{WRID: 3, Opcode: transport.WCSend, ByteLen: 10}})
			if h.Timer != 0 {
				t.Errorf("timer %v armed with nothing outstanding", h.Timer)
			}
		})
	}
}

// TestHeldResponses: while the responder holds its responses (a batch of
// packets taken at once), the plain ACKs it owes collapse into the last
// one, which acknowledges them all; nothing is sent until the release.
// Anything but a plain ACK for a later PSN keeps its place: an RNR NAK,
// a sequence NAK and the ACKs around them go out in order, and a NAK that
// ends the QP (an access error) sends the ACKs held before it first.
func TestHeldResponses(t *testing.T) {
	write := func(psn uint32, off int) roce.PacketFields {
		f := reqPacket(roce.RCRDMAWriteOnly, psn, true, []byte{1, 2, 3, 4})
		f.RETH = roce.RETHFields{VA: testVA + uint64(off), RKey: testKey, DMALength: 4}
		return f
	}
	send := func(psn uint32) roce.PacketFields { return reqPacket(roce.RCSendOnly, psn, true, []byte{5, 6}) }
	badKey := func(psn uint32) roce.PacketFields {
		f := write(psn, 0)
		f.RETH.RKey ^= 0x100
		return f
	}
	rnr := roce.RNRNAKSyndrome(testMinRNR)
	tests := []struct {
		name    string
		packets []roce.PacketFields
		recvs   int
		want    []wantPacket
		events  int
	}{
		{"four WRITEs, one ACK", []roce.PacketFields{write(testRQPSN, 0), write(testRQPSN+1, 8), write(testRQPSN+2, 16), write(testRQPSN+3, 24)}, 0,
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 3, syn: ackOK, msn: 4}}, 0},
		{"a duplicate's ACK is the same", []roce.PacketFields{write(testRQPSN, 0), write(testRQPSN+1, 8), write(testRQPSN, 0)}, 0,
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: ackOK, msn: 2}}, 0},
		{"an RNR NAK between ACKs", []roce.PacketFields{write(testRQPSN, 0), send(testRQPSN + 1), send(testRQPSN + 1)}, 0,
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}, {op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: rnr, msn: 1},
				{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: rnr, msn: 1}}, 0},
		{"a sequence NAK between ACKs", []roce.PacketFields{write(testRQPSN, 0), write(testRQPSN+2, 8), write(testRQPSN+1, 16), write(testRQPSN+2, 24)}, 0,
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1},
				{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError), msn: 1},
				{op: roce.RCAcknowledge, psn: testRQPSN + 2, syn: ackOK, msn: 3}}, 0},
		{"an access error sends the held ACK first", []roce.PacketFields{write(testRQPSN, 0), write(testRQPSN+1, 8), badKey(testRQPSN + 2)}, 0,
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: ackOK, msn: 2},
				{op: roce.RCAcknowledge, psn: testRQPSN + 2, syn: roce.NAKSyndrome(roce.NAKRemoteAccessError), msn: 2}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.qp.HoldResponses()
			for _, f := range tt.packets {
				h.receive(f)
			}
			if tt.events == 0 {
				if got := h.Take(); len(got) != 0 {
					t.Fatalf("%d packets sent while held", len(got))
				}
			}
			h.qp.ReleaseResponses()
			checkPackets(t, h.Take(), tt.want)
			if len(h.Events) != tt.events {
				t.Errorf("events %v, want %d", h.Events, tt.events)
			}
		})
	}
}

// TestNAKOwedWhenPeerBusy: a class-C NAK the receiver's full queue refuses
// is owed, not lost: the QP goes to ERR at once, asks to be kicked, and
// sends the NAK (and nothing else) when the kick comes, as often as the
// peer is still busy. Lost, the requester would retry until RETRY_EXC_ERR
// instead of ending with the remote access error.
func TestNAKOwedWhenPeerBusy(t *testing.T) {
	for _, busy := range []int{1, 3} {
		h := newHarness(t, nil)
		h.Busy = busy
		bad := reqPacket(roce.RCRDMAWriteOnly, testRQPSN, true, make([]byte, 8))
		bad.RETH = roce.RETHFields{VA: testVA, RKey: testKey + 1, DMALength: 8}
		h.receive(bad)
		if sent := h.Take(); len(sent) != 0 {
			t.Fatalf("busy %d: %d packets sent into a full queue", busy, len(sent))
		}
		if len(h.Events) != 1 || h.Events[0] != transport.EventQPAccessError {
			t.Fatalf("busy %d: events %v, want QP access error at once", busy, h.Events)
		}
		for i := 0; i < busy; i++ {
			if n := len(h.Kicks); n == 0 || h.Kicks[n-1] != transport.WorkRespond {
				t.Fatalf("busy %d, round %d: kicks %v, want a respond kick", busy, i, h.Kicks)
			}
			h.Kicks = nil
			h.qp.FlushResponses()
		}
		checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: nakRemoteAccess}})
		h.Kicks = nil
		h.qp.FlushResponses()
		if sent := h.Take(); len(sent) != 0 || len(h.Kicks) != 0 {
			t.Errorf("busy %d: after the NAK went, %d more packets and kicks %v", busy, len(sent), h.Kicks)
		}
	}
}

// TestResponderSendInvalidateRefused: a SEND with invalidate naming an
// R_Key the QP may not invalidate (here a memory region's) fails the
// receive with REM_INV_REQ and answers NAK Invalid Request, so the
// requester completes with an error instead of retrying into RETRY_EXC;
// the region stays.
func TestResponderSendInvalidateRefused(t *testing.T) {
	h := newHarness(t, nil)
	h.PostRecv(7, 0, 256)
	f := reqPacket(roce.RCSendOnlyWithInvalidate, testRQPSN, true, make([]byte, 32))
	f.IETH = testKey
	h.receive(f)
	checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKInvalidRequest), msn: 0}})
	if len(h.Events) != 1 || h.Events[0] != transport.EventQPRequestErr {
		t.Errorf("events %v, want a request error", h.Events)
	}
	c := h.Completions()
	if len(c) != 1 || c[0].WRID != 7 || c[0].Status != transport.StatusRemInvReq {
		t.Fatalf("completions %+v, want receive 7 with REM_INV_REQ", c)
	}
	if _, ok := h.Mem().Remote(testPD, testKey, testVA, 32, mr.RemoteWrite); !ok {
		t.Error("the region was invalidated")
	}
}
