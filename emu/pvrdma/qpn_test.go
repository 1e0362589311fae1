package pvrdma_test

import (
	"math/bits"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestQPNsCarryRandomBits: a QPN is the QP's handle in its low bits and
// per-device random bits above, never all zero (24 bits in all, never the
// multicast QPN 0xFFFFFF); the GSI QP stays QPN 1.
func TestQPNsCarryRandomBits(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHostRAM(t, sw, 1, 4<<20), newHostRAM(t, sw, 2, 4<<20)
	if _, _, _, gsi, err := a.KernelGSI(); err != nil || gsi.QPN != 1 {
		t.Fatalf("GSI QP: %v", err)
	}
	w := bits.Len32(min(a.Caps().MaxQP, 1<<16) - 1)
	const n = 8
	var qpnsA, qpnsB []uint32
	for range n {
		for _, hq := range []struct {
			h    *host
			qpns *[]uint32
		}{{a, &qpnsA}, {b, &qpnsB}} {
			qp := hq.h.qp(t, abi.QPTypeRC, 4)
			if qp.QPN&(1<<w-1) != qp.Handle || qp.QPN >= 0xFFFFFF || qp.QPN < 1<<w {
				t.Fatalf("QPN %#x of handle %d", qp.QPN, qp.Handle)
			}
			*hq.qpns = append(*hq.qpns, qp.QPN)
		}
	}
	// Same handles on both devices, so the QPNs differ in their random bits
	// only: that all n pairs agree, or that every QPN is below 1<<w
	// (sequential), has probability 2^-(14*n) with the default caps.
	same, small := true, true
	for i := range n {
		same = same && qpnsA[i] == qpnsB[i]
		small = small && qpnsA[i] < 1<<w && qpnsB[i] < 1<<w
	}
	if same || small {
		t.Fatalf("QPNs are guessable: a %#x, b %#x", qpnsA, qpnsB)
	}
}

// TestQPNGuess: a packet that names a QP by its handle (what a QPN used to
// be) or by another device's random bits reaches nothing, even from the
// connected peer's address; the real QPN reaches it (the injection path
// works). The frames enter the switch behind its source check, as a frame
// from the peer's address does.
func TestQPNGuess(t *testing.T) {
	checkGoroutines(t)
	var wire fabric.Link
	sw := fabric.NewSwitch(func(next fabric.Link) fabric.Link { wire = next; return next })
	a, b := newHostRAM(t, sw, 1, 4<<20), newHostRAM(t, sw, 2, 4<<20)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	inject := sw.Attach("inject", [6]byte{0x02, 0, 0, 0, 0, 9}, func(f []byte) bool { fabric.Release(f); return true })
	t.Cleanup(inject.Detach)
	w := bits.Len32(min(b.Caps().MaxQP, 1<<16) - 1)
	payload := []byte("guessed")
	tests := []struct {
		name   string
		destQP uint32
		lands  bool
	}{
		{"the handle", qb.Handle, false},
		{"the handle with other high bits", qb.QPN ^ 1<<w, false},
		{"the handle with the top bit flipped", qb.QPN ^ 1<<23, false},
		{"the QPN", qb.QPN, true},
	}
	qb.PostRecv(uverbs.RecvWQE{WRID: 20, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.lands && tt.destQP == qb.QPN {
				// The handle never is: a QPN's random bits are never all
				// zero.
				t.Fatalf("QPN %#x is guessable", qb.QPN)
			}
			f := roce.PacketFields{Payload: payload}
			f.BTH = roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: tt.destQP, PSN: verbstest.StartPSN(qa.QPN), AckReq: true}
			wire.Send(inject, verbstest.RawFrame(t, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), f))
			if !tt.lands {
				noCQE(t, b.cq, a, b)
				return
			}
			if e := poll(t, b.cq, a, b); e.Status != uverbs.WCSuccess || e.ByteLen != uint32(len(payload)) {
				t.Fatalf("the real QPN: %+v", e)
			}
		})
	}
}
