package rc

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// What happens to the region of the Env between two uses of it by work in
// flight: each way a registration can end.
type regionFate struct {
	name  string
	apply func(h *harness)
}

// successor is the region that next holds the Env's handle: pages of its
// own, no remote access, in protection domain pd, with key and generation
// gen (the Env's region is generation 0).
func successor(h *harness, pd, key uint32, gen uint64) *mr.Region {
	old := h.Regions[mr.Handle(testKey)]
	pages := make(dma.Pages, len(old.Pages))
	copy(pages, old.Pages)
	pages[0], pages[1] = pages[1], pages[0] // other pages behind the same addresses
	return &mr.Region{PD: pd, Access: mr.LocalWrite, Valid: true, Start: old.Start, Length: old.Length,
		Pages: pages, LKey: key, RKey: key, Gen: gen}
}

var regionFates = []regionFate{
	{"deregistered", func(h *harness) { delete(h.Regions, mr.Handle(testKey)) }},
	{"invalidated", func(h *harness) { h.Regions[mr.Handle(testKey)].Valid = false }},
	// The handle is reused by another PD's region (the key a device without
	// variants would hand out again).
	{"handle reused by another PD", func(h *harness) {
		h.Regions[mr.Handle(testKey)] = successor(h, testPD+1, testKey, 1)
	}},
	// Registered again in the same PD under the same key (an FRMR whose
	// consumer kept its key), but with remote access: only the registration
	// generation tells them apart.
	{"registered again under the same key", func(h *harness) {
		next := successor(h, testPD, testKey, 1)
		next.Access = h.Regions[mr.Handle(testKey)].Access
		h.Regions[mr.Handle(testKey)] = next
	}},
	{"registered again under the next variant", func(h *harness) {
		next := successor(h, testPD, mr.Key(mr.Handle(testKey), mr.NextVariant(mr.Variant(testKey))), 1)
		next.Access = h.Regions[mr.Handle(testKey)].Access
		h.Regions[mr.Handle(testKey)] = next
	}},
}

var nakRemoteAccess = roce.NAKSyndrome(roce.NAKRemoteAccessError)

// checkAccessError checks that the responder raised one QP access error
// (IBV_EVENT_QP_ACCESS_ERR) and is in ERR.
func checkAccessError(t *testing.T, h *harness) {
	t.Helper()
	if len(h.Events) != 1 || h.Events[0] != transport.EventQPAccessError {
		t.Errorf("events %v, want one QP access error", h.Events)
	}
	if h.qp.State() != transport.StateErr {
		t.Errorf("QP state %v, want ERR", h.qp.State())
	}
}

// TestDeregMidWrite: the responder's region goes between the packets of a
// multi-packet WRITE: the next packet is refused with a remote access error
// NAK, the QP raises QP_ACCESS_ERR, and the region's old pages (and the
// successor's) are unchanged byte for byte by it and by every later packet.
func TestDeregMidWrite(t *testing.T) {
	for _, fate := range regionFates {
		t.Run(fate.name, func(t *testing.T) {
			h := newHarness(t, nil)
			first := reqPacket(roce.RCRDMAWriteFirst, testRQPSN, false, bytes.Repeat([]byte{0xAA}, testPMTU))
			first.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: 4 * testPMTU}
			h.receive(first)
			fate.apply(h)
			before := append([]byte(nil), h.RAM.Mem...)
			h.receive(reqPacket(roce.RCRDMAWriteMiddle, testRQPSN+1, false, bytes.Repeat([]byte{0xBB}, testPMTU)))
			h.receive(reqPacket(roce.RCRDMAWriteMiddle, testRQPSN+2, false, bytes.Repeat([]byte{0xCC}, testPMTU)))
			h.receive(reqPacket(roce.RCRDMAWriteLast, testRQPSN+3, true, bytes.Repeat([]byte{0xDD}, testPMTU)))
			checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 1, syn: nakRemoteAccess}})
			if !bytes.Equal(h.RAM.Mem, before) {
				t.Error("guest memory changed after the region went")
			}
			checkAccessError(t, h)
		})
	}
}

// TestDuplicateReadAfterDereg: a READ executed; its region goes; a
// duplicate of the READ (a requester that lost the responses, or a peer
// replaying it on purpose) gets a remote access error NAK, never data,
// whatever now holds the handle.
func TestDuplicateReadAfterDereg(t *testing.T) {
	const length = 2*testPMTU + 40
	for _, fate := range regionFates {
		t.Run(fate.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.Fill(0, 4*testPMTU, 9)
			read := reqPacket(roce.RCRDMAReadRequest, testRQPSN, true, nil)
			read.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: length}
			h.receive(read)
			if got := len(h.Take()); got != 3 {
				t.Fatalf("%d READ responses, want 3", got)
			}
			fate.apply(h)
			h.receive(read)
			checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: nakRemoteAccess, msn: 1}})
			checkAccessError(t, h)
		})
	}
}

// TestDeregUnderReadStream: the region of a long READ goes while its
// responses are being sent (in batches of respBatch packets): the next
// response is a remote access error NAK at its PSN, and no byte of the
// region is read after it went.
func TestDeregUnderReadStream(t *testing.T) {
	const length = transporttest.Pages * dma.PageSize // more than respBatch packets of testPMTU
	for _, fate := range regionFates {
		t.Run(fate.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.Fill(0, length, 3)
			read := reqPacket(roce.RCRDMAReadRequest, testRQPSN, true, nil)
			read.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: length}
			h.receive(read)
			if got := len(h.Take()); got != respBatch {
				t.Fatalf("%d READ responses in the first batch, want %d", got, respBatch)
			}
			fate.apply(h)
			h.qp.FlushResponses() // the device's kick
			checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + respBatch, syn: nakRemoteAccess, msn: 1}})
			checkAccessError(t, h)
			h.qp.FlushResponses()
			if sent := h.Take(); len(sent) != 0 {
				t.Errorf("%d packets after the NAK", len(sent))
			}
		})
	}
}

// TestDeregMidSend: the region of the receive request a multi-packet SEND
// is landing in goes between its packets: the receive completes with
// LOC_PROT_ERR, the responder NAKs with a remote operational error (the
// error is the responder's own, IBTA 9.9.3.1.3), and nothing more lands.
func TestDeregMidSend(t *testing.T) {
	for _, fate := range regionFates {
		t.Run(fate.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.PostRecv(7, 0, 4*testPMTU)
			h.receive(reqPacket(roce.RCSendFirst, testRQPSN, false, bytes.Repeat([]byte{0xAA}, testPMTU)))
			fate.apply(h)
			before := append([]byte(nil), h.RAM.Mem...)
			h.receive(reqPacket(roce.RCSendMiddle, testRQPSN+1, false, bytes.Repeat([]byte{0xBB}, testPMTU)))
			h.receive(reqPacket(roce.RCSendLast, testRQPSN+2, true, bytes.Repeat([]byte{0xCC}, 10)))
			checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN + 1,
				syn: roce.NAKSyndrome(roce.NAKRemoteOperationalErr)}})
			transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
				{WRID: 7, Opcode: transport.WCRecv, Status: transport.StatusLocProtErr, Recv: true}})
			if !bytes.Equal(h.RAM.Mem, before) {
				t.Error("guest memory changed after the region went")
			}
			checkAccessError(t, h)
		})
	}
}

// TestRequesterRegionGone: the region a send request's SGEs name goes
// while the request is in flight. A retransmission, a READ response or an
// atomic acknowledge that would use it completes the request with
// LOC_PROT_ERR, the QP goes to ERR, and the requests after it are flushed;
// nothing is read from or written to the old pages.
func TestRequesterRegionGone(t *testing.T) {
	tests := []struct {
		name   string
		wr     transport.SendWR
		n      int
		answer func(h *harness) // what makes the requester use the region
		wc     transport.WCOpcode
	}{
		{"retransmitted SEND", transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 3 * testPMTU,
			func(h *harness) { h.fire() }, transport.WCSend},
		{"retransmitted WRITE after a sequence NAK", transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true, RemoteAddr: 0x5000, RKey: 3},
			3 * testPMTU, func(h *harness) {
				h.receive(ack(testSQPSN+1, roce.NAKSyndrome(roce.NAKPSNSequenceError), 0))
			}, transport.WCWrite},
		{"READ response", transport.SendWR{ID: 1, Opcode: transport.OpRead, Signaled: true, RemoteAddr: 0x5000, RKey: 3},
			testPMTU, func(h *harness) {
				rsp := reqPacket(roce.RCRDMAReadResponseOnly, testSQPSN, false, bytes.Repeat([]byte{0xEE}, testPMTU))
				rsp.AETH = roce.AETHFields{Syndrome: ackOK}
				h.receive(rsp)
			}, transport.WCRead},
		{"atomic acknowledge", transport.SendWR{ID: 1, Opcode: transport.OpFetchAdd, Signaled: true, RemoteAddr: 0x6000, RKey: 3, CompareAdd: 1},
			8, func(h *harness) {
				atomicAck := ack(testSQPSN, ackOK, 1)
				atomicAck.BTH.Opcode = roce.RCAtomicAcknowledge
				atomicAck.AtomicAckETH = 0xEEEEEEEEEEEEEEEE
				h.receive(atomicAck)
			}, transport.WCFetchAdd},
	}
	for _, tt := range tests {
		for _, fate := range regionFates {
			t.Run(tt.name+"/"+fate.name, func(t *testing.T) {
				h := newHarness(t, nil)
				h.post(tt.wr, 0, tt.n)
				h.post(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true}, 0, 8)
				h.Take()
				fate.apply(h)
				before := append([]byte(nil), h.RAM.Mem...)
				tt.answer(h)
				if sent := h.Take(); len(sent) != 0 {
					t.Errorf("%d packets sent from a region that went: %v", len(sent), describe(sent))
				}
				transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
					{WRID: 1, Opcode: tt.wc, Status: transport.StatusLocProtErr},
					{WRID: 2, Opcode: transport.WCSend, Status: transport.StatusWRFlushErr}})
				if h.qp.State() != transport.StateErr {
					t.Errorf("QP state %v, want ERR", h.qp.State())
				}
				if !bytes.Equal(h.RAM.Mem, before) {
					t.Error("guest memory changed after the region went")
				}
			})
		}
	}
}
