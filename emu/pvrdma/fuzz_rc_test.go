package pvrdma_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// FuzzRCPackets plays a hostile peer: arbitrary InfiniBand transport packets
// (2-byte length prefix each), framed with a valid ICRC from host a's
// address to host b's, addressed to b's RC QP, which is connected and has
// receives posted and an RDMA-capable MR. The device must never panic, and
// must still serve commands and a fresh QP pair afterwards.
//
// The frames carry a's address, which the injecting port does not own: they
// are put on the switch behind its ingress check (where a fault rule sits),
// so they reach b's device as if a had sent them.
func FuzzRCPackets(f *testing.F) {
	seed := func(fields ...roce.PacketFields) []byte {
		var out []byte
		for _, pf := range fields {
			b, err := roce.Build(make([]byte, 4096), &pf)
			if err != nil {
				f.Fatal(err)
			}
			out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
			out = append(out, b...)
		}
		return out
	}
	pf := func(op roce.Opcode, psn uint32, payload int) roce.PacketFields {
		p := roce.PacketFields{Payload: make([]byte, payload)}
		p.BTH.Opcode, p.BTH.PSN, p.BTH.PKey, p.BTH.AckReq = op, psn, 0xFFFF, true
		p.RETH = roce.RETHFields{VA: 0x1000, RKey: 0x100, DMALength: uint32(payload)}
		p.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit}
		return p
	}
	f.Add(seed(pf(roce.RCSendOnly, 0x102, 100)))
	f.Add(seed(pf(roce.RCSendFirst, 0x102, 1024), pf(roce.RCSendMiddle, 0x103, 1024), pf(roce.RCSendLast, 0x104, 10)))
	f.Add(seed(pf(roce.RCRDMAWriteOnly, 0x102, 64), pf(roce.RCRDMAReadRequest, 0x103, 0)))
	f.Add(seed(pf(roce.RCAcknowledge, 0x102, 0), pf(roce.RCRDMAReadResponseOnly, 0x103, 8)))
	f.Add(seed(pf(roce.RCCompareSwap, 0x102, 0), pf(roce.RCSendOnly, 0x0, 4)))
	f.Fuzz(func(t *testing.T, in []byte) {
		var wire fabric.Link // the switch behind the ports' source check
		sw := fabric.NewSwitch(func(next fabric.Link) fabric.Link { wire = next; return next })
		a, b := newHostRAM(t, sw, 1, 4<<20), newHostRAM(t, sw, 2, 4<<20)
		dst, lkB, rkB := b.mr(t, 8192, allAccess)
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		for i := 0; i < 4; i++ {
			qb.PostRecv(uverbs.RecvWQE{WRID: uint64(i), SGE: []uverbs.SGE{{Addr: dst, Length: 8192, LKey: lkB}}})
		}
		// An outstanding READ on b, so responses have a requester to meet.
		w := send(uverbs.OpRDMARead, 9, 0, uverbs.SGE{Addr: dst, Length: 2048, LKey: lkB})
		w.SetRDMA(0x1000, rkB)
		qb.PostSend(w)
		inject := sw.Attach("peer", [6]byte{9}, func([]byte) bool { return true })
		for n := 0; len(in) >= 2 && n < 64; n++ {
			l := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			if l > len(in) {
				l = len(in)
			}
			ib := append([]byte(nil), in[:l]...)
			in = in[l:]
			if len(ib) >= roce.BTHSize {
				roce.BTH(ib).SetDestQP(qb.QPN)
			}
			ff := roce.FrameFields{SrcIP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), DstIP: netip.AddrFrom4([4]byte{10, 0, 0, 2}), HopLimit: 64}
			frame, err := roce.Frame(make([]byte, 64+len(ib)+64), &ff, ib)
			if err != nil {
				continue
			}
			wire.Send(inject, frame)
		}
		for i := 0; i < 3; i++ {
			a.dev.Sync()
			b.dev.Sync()
		}
		if _, err := b.QueryPort(1); err != nil {
			t.Fatalf("device stopped serving: %v", err)
		}
		_ = qa
	})
}
