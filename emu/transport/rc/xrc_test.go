package rc

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// TestXRC: an XRC QP's requests go with the XRC opcodes and the XRCETH of
// their request, its responses with the XRC opcodes; it takes the XRC
// ACK that completes its request and an XRC request it answers with an
// XRC ACK, and drops RC packets; an RC QP drops XRC packets.
func TestXRC(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.XRC = true })
	h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, XRCSRQN: 0x654321}, 0, testPMTU+1)
	sent := h.Take()
	if len(sent) != 2 || sent[0].Fields.BTH.Opcode != roce.RCSendFirst.XRC() || sent[1].Fields.BTH.Opcode != roce.RCSendLast.XRC() ||
		sent[0].Fields.XRCETH != 0x654321 || sent[1].Fields.XRCETH != 0x654321 {
		t.Fatalf("sent %+v", sent)
	}
	h.receive(ack(testSQPSN+1, ackOK, 1)) // an RC ACK: dropped
	if len(h.Completions()) != 0 {
		t.Fatal("an RC ACK completed an XRC request")
	}
	a := ack(testSQPSN+1, ackOK, 1)
	a.BTH.Opcode = roce.RCAcknowledge.XRC()
	h.receive(a)
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 1, Opcode: transport.WCSend, ByteLen: testPMTU + 1}})

	h.PostRecv(7, 0, 4096)
	h.receive(reqPacket(roce.RCSendOnly, testRQPSN, true, []byte("rc"))) // dropped
	req := reqPacket(roce.RCSendOnly.XRC(), testRQPSN, true, []byte("xrc"))
	req.XRCETH = 5
	h.receive(req)
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 7, Opcode: transport.WCRecv, ByteLen: 3, Recv: true}})
	checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge.XRC(), psn: testRQPSN, syn: ackOK, msn: 1}})

	rc := newHarness(t, nil)
	rc.PostRecv(7, 0, 4096)
	rc.receive(req)
	if len(rc.Completions()) != 0 || len(rc.Take()) != 0 {
		t.Fatal("an RC QP took an XRC packet")
	}
}
