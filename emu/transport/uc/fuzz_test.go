package uc

import (
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// FuzzUC plays a hostile peer against one UC QP's responder: arbitrary
// transport packets (2-byte length prefix each) with two receive requests
// posted. The registered region is the upper half of the guest memory
// only. Oracle: no receive completion counts more bytes than the peer's
// packets carried, or more than its receive request holds; nothing is
// written in the lower half; no packet goes back on the wire.
func FuzzUC(f *testing.F) {
	seed := func(fields ...roce.PacketFields) []byte { return transporttest.Seed(f, fields...) }
	full := make([]byte, testPMTU)
	f.Add(seed(pkt(roce.UCSendOnly, testRQPSN, []byte("abcd"))))
	f.Add(seed(pkt(roce.UCSendFirst, testRQPSN, full), pkt(roce.UCSendMiddle, testRQPSN+1, full), pkt(roce.UCSendLast, testRQPSN+2, full)))
	w := pkt(roce.UCRDMAWriteFirst, testRQPSN, full)
	w.RETH = roce.RETHFields{VA: transporttest.VA + 9*dma.PageSize, RKey: transporttest.Key, DMALength: 2*testPMTU + 1}
	f.Add(seed(w, pkt(roce.UCRDMAWriteMiddle, testRQPSN+1, full), pkt(roce.UCRDMAWriteLastWithImmediate, testRQPSN+2, []byte{1})))
	w.RETH.VA = transporttest.VA
	f.Add(seed(w, pkt(roce.UCSendOnly, testRQPSN+7, []byte("x"))))
	f.Fuzz(func(t *testing.T, in []byte) {
		h := newHarness(t)
		// The region: pages 8..15 only.
		const half = transporttest.Pages / 2
		r := h.Regions[mr.Handle(transporttest.Key)]
		r.Start, r.Length, r.Pages = transporttest.VA+half*dma.PageSize, half*dma.PageSize, r.Pages[half:]
		base := half * dma.PageSize
		segs, _, err := h.Mem().Segs(transporttest.PD, []mr.SGE{{Addr: transporttest.VA + uint64(base), Length: 600, LKey: transporttest.Key}}, true)
		if err != nil {
			t.Fatal(err)
		}
		h.Recvs = append(h.Recvs, transport.RecvWR{ID: 1, Segs: segs, Cap: 600}, transport.RecvWR{ID: 2, Segs: segs, Cap: 600})
		var carried uint64
		transporttest.Packets(in, 64, func(b []byte) {
			if p, err := roce.Parse(b); err == nil {
				carried += uint64(len(p.Payload))
				h.qp.Receive(&p)
			}
		})
		for _, c := range h.Done {
			if c.Recv && c.Status == transport.StatusSuccess && (uint64(c.ByteLen) > carried && c.Opcode == transport.WCRecv || c.Opcode == transport.WCRecv && c.ByteLen > 600) {
				t.Fatalf("completion of %d bytes; %d carried", c.ByteLen, carried)
			}
		}
		for i, v := range h.BytesAt(0, base) {
			if v != 0 {
				t.Fatalf("byte %#x outside the region written", i)
			}
		}
		if len(h.Sent) != 0 {
			t.Fatalf("%d packets sent", len(h.Sent))
		}
	})
}
