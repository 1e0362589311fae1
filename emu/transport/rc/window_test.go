package rc

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// The requester believes ACKs and NAKs only inside its outstanding window
// (rocev2.md §3.5): a response for a PSN never sent completes nothing, a
// NAK names the request holding its PSN.

// TestForgedAckBeyondWindow: a 1 MiB SEND is larger than the window, so
// only its first rcWindow packets go out; an ACK of its last PSN (never
// sent) completes nothing, and the SEND still retries and fails with
// RETRY_EXC_ERR when its peer stays silent.
func TestForgedAckBeyondWindow(t *testing.T) {
	const size = 1 << 20
	h := newHarness(t, func(cfg *Config) { cfg.RetryCnt = 1 })
	chunk := transporttest.Pages * 4096
	var segs []mr.Seg
	for off := 0; off < size; off += chunk {
		segs = append(segs, h.Segs(0, chunk)...)
	}
	h.Sends = append(h.Sends, transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Segs: segs, Length: size})
	h.qp.Pump()
	if n := len(h.Take()); n != rcWindow {
		t.Fatalf("%d packets sent, want the window's %d", n, rcWindow)
	}
	lastPSN := roce.PSNAdd(testSQPSN, size/testPMTU-1)
	h.receive(ack(lastPSN, ackOK, 1))
	transporttest.CheckCompletions(t, h.Completions(), nil)
	if n := len(h.Take()); n != 0 {
		t.Errorf("%d packets sent because of the forged ACK", n)
	}
	if h.qp.Outstanding() != 1 {
		t.Fatalf("%d requests outstanding, want the SEND", h.qp.Outstanding())
	}
	h.fire() // the one retry: the window again, from the first PSN
	sent := h.Take()
	if len(sent) != rcWindow || sent[0].Fields.BTH.PSN != testSQPSN {
		t.Fatalf("retry: %d packets, want %d from PSN %d", len(sent), rcWindow, testSQPSN)
	}
	h.fire()
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
		{WRID: 1, Opcode: transport.WCSend, Status: transport.StatusRetryExc}})
	if len(h.Events) != 1 || h.Events[0] != transport.EventQPRequestErr {
		t.Errorf("events %v, want QP request error", h.Events)
	}
}

// TestResponseWindow: three SENDs out (PSN 500, PSNs 501–502, PSN 503, or a
// READ at 500 first); responses arrive (and the timer may expire after
// them); what completes, what goes out.
func TestResponseWindow(t *testing.T) {
	accessNAK := roce.NAKSyndrome(roce.NAKRemoteAccessError)
	seqNAK := roce.NAKSyndrome(roce.NAKPSNSequenceError)
	sendOK := func(id uint64, n uint32) transport.Completion {
		return transport.Completion{WRID: id, Opcode: transport.WCSend, ByteLen: n}
	}
	resendAll := []wantPacket{ // still outstanding: the timeout resends everything
		{op: roce.RCSendOnly, psn: testSQPSN, ackReq: true},
		{op: roce.RCSendFirst, psn: testSQPSN + 1},
		{op: roce.RCSendLast, psn: testSQPSN + 2, ackReq: true},
		{op: roce.RCSendOnly, psn: testSQPSN + 3, ackReq: true}}
	tests := []struct {
		name      string
		readFirst bool // the first request is a one-packet READ, not a SEND
		in        []roce.PacketFields
		timeout   bool // then the retransmission timer expires
		want      []transport.Completion
		out       []wantPacket
		events    []transport.Event
	}{
		{name: "ACK beyond the last PSN sent", timeout: true, out: resendAll, in: []roce.PacketFields{ack(testSQPSN+4, ackOK, 3)}},
		{name: "ACK far beyond", timeout: true, out: resendAll, in: []roce.PacketFields{ack(testSQPSN+1<<22, ackOK, 3)}},
		{name: "ACK beyond, then the real one",
			in:   []roce.PacketFields{ack(testSQPSN+4, ackOK, 3), ack(testSQPSN+3, ackOK, 3)},
			want: []transport.Completion{sendOK(1, 10), sendOK(2, 2*testPMTU), sendOK(3, 10)}},
		{name: "duplicate ACK of an old PSN",
			in:   []roce.PacketFields{ack(testSQPSN, ackOK, 1), ack(testSQPSN, ackOK, 1), ack(testSQPSN-1, ackOK, 0)},
			want: []transport.Completion{sendOK(1, 10)}},
		{name: "access NAK beyond the last PSN sent", timeout: true, out: resendAll, in: []roce.PacketFields{ack(testSQPSN+4, accessNAK, 3)}},
		{name: "sequence NAK beyond the last PSN sent", timeout: true, out: resendAll, in: []roce.PacketFields{ack(testSQPSN+4, seqNAK, 3)}},
		{name: "RNR NAK beyond the last PSN sent", timeout: true, out: resendAll, in: []roce.PacketFields{ack(testSQPSN+4, roce.RNRNAKSyndrome(testMinRNR), 3)}},
		{name: "access NAK older than the oldest unacknowledged PSN",
			in:   []roce.PacketFields{ack(testSQPSN+1, ackOK, 1), ack(testSQPSN, accessNAK, 1)},
			want: []transport.Completion{sendOK(1, 10)}},
		{name: "sequence NAK older than the oldest unacknowledged PSN",
			in:   []roce.PacketFields{ack(testSQPSN+2, ackOK, 2), ack(testSQPSN, seqNAK, 2)},
			want: []transport.Completion{sendOK(1, 10), sendOK(2, 2*testPMTU)}},
		{name: "access NAK for the 2nd of three",
			in: []roce.PacketFields{ack(testSQPSN+2, accessNAK, 1)},
			want: []transport.Completion{sendOK(1, 10),
				{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusRemAccess},
				{WRID: 3, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}},
			events: []transport.Event{transport.EventQPAccessError}},
		{name: "access NAK for the SEND after a READ whose response was lost", readFirst: true,
			in: []roce.PacketFields{ack(testSQPSN+1, accessNAK, 1)},
			want: []transport.Completion{
				{WRID: 1, Opcode: transport.WCRead, Status: transport.StatusWRFlushErr},
				{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusRemAccess},
				{WRID: 3, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}},
			events: []transport.Event{transport.EventQPAccessError}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if tt.readFirst {
				h.post(transport.SendWR{ID: 1, Opcode: transport.OpRead, Signaled: true, RemoteAddr: 0x5000, RKey: 3}, 0, 10) // PSN 500
			} else {
				h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 0, 10) // PSN 500
			}
			h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, 2*testPMTU) // PSNs 501, 502
			h.post(transport.SendWR{ID: 3, Opcode: transport.OpSend, Signaled: true}, 0, 10)         // PSN 503
			if n := len(h.Take()); n != 4 {
				t.Fatalf("%d packets sent, want 4", n)
			}
			for _, f := range tt.in {
				h.receive(f)
			}
			if tt.timeout {
				h.fire()
			}
			transporttest.CheckCompletions(t, h.Completions(), tt.want)
			checkPackets(t, h.Take(), tt.out)
			if len(h.Events) != len(tt.events) || (len(tt.events) > 0 && h.Events[0] != tt.events[0]) {
				t.Errorf("events %v, want %v", h.Events, tt.events)
			}
			if tt.events == nil && h.qp.State() != transport.StateRTS {
				t.Errorf("state %v, want RTS", h.qp.State())
			}
		})
	}
}
