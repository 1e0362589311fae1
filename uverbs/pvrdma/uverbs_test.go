package pvrdma

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRing(t *testing.T) {
	r := Ring{N: 4}
	cases := []struct {
		prod, cons  uint32
		empty, full bool
		pending     uint32
	}{
		{0, 0, true, false, 0},
		{4, 0, false, true, 4},
		{7, 3, false, true, 4},
		{1, 7, false, false, 2},
		{3, 0, false, false, 3},
	}
	for _, c := range cases {
		if r.Empty(c.prod, c.cons) != c.empty || r.Full(c.prod, c.cons) != c.full || r.Pending(c.prod, c.cons) != c.pending {
			t.Errorf("prod %d cons %d: empty %v full %v pending %d", c.prod, c.cons,
				r.Empty(c.prod, c.cons), r.Full(c.prod, c.cons), r.Pending(c.prod, c.cons))
		}
	}
	if r.Valid(8) || !r.Valid(7) || r.Next(7) != 0 || r.Slot(5) != 1 {
		t.Error("index arithmetic")
	}
	// The async ring's quirk: N=1536 cycles 0..1023 over slots 0..511.
	a := Ring{N: 1536}
	i := uint32(1023)
	if a.Next(i) != 0 || a.Slot(1023) != 511 || a.Slot(512) != 0 {
		t.Errorf("N=1536: next(1023)=%d slot(1023)=%d slot(512)=%d", a.Next(i), a.Slot(1023), a.Slot(512))
	}
}

func TestStrides(t *testing.T) {
	for _, c := range []struct{ sge, sq, rq uint32 }{{1, 128, 32}, {2, 128, 64}, {4, 256, 128}, {16, 512, 512}} {
		if SQStride(c.sge) != c.sq || RQStride(c.sge) != c.rq {
			t.Errorf("sge %d: SQ %d RQ %d", c.sge, SQStride(c.sge), RQStride(c.sge))
		}
	}
}

func TestWQERoundTrip(t *testing.T) {
	w := SendWQE{WRID: 0x1122334455667788, Opcode: OpAtomicCmpSwp, SendFlags: SendSignaled,
		Ex: [4]byte{1, 2, 3, 4}, SGE: []SGE{{0x1000, 8, 0x100}, {0x2000, 16, 0x200}}}
	w.NumSGE = 2
	w.SetAtomic(0xdead0000, 5, 6, 0x300)
	b := make([]byte, 128)
	w.Encode(b)
	got, err := DecodeSendWQE(b, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	ra, ca, sw, rk := got.Atomic()
	if ra != 0xdead0000 || ca != 5 || sw != 6 || rk != 0x300 {
		t.Errorf("atomic %#x %d %d %#x", ra, ca, sw, rk)
	}
	if _, err := DecodeSendWQE(b, 1); err == nil {
		t.Error("num_sge above the queue limit accepted")
	}
	w.NumSGE = 0xFFFFFFFF
	w.Encode(b)
	if _, err := DecodeSendWQE(b, 16); err == nil {
		t.Error("num_sge 0xFFFFFFFF accepted")
	}
	av := AV{PortPD: 1<<24 | 5, SLTClassFlowLbl: 3<<20 | 0x12345, DGID: [16]byte{0xfe, 0x80}, SrcPathBits: 0x80, GIDIndex: 1, HopLimit: 64, DMAC: [6]byte{1, 2, 3, 4, 5, 6}}
	u := SendWQE{Opcode: OpSend}
	u.SetUD(0x44, 0x80010000, av)
	qpn, qkey, got2 := u.UD()
	if qpn != 0x44 || qkey != 0x80010000 || got2 != av || got2.FlowLabel() != 0x12345 || got2.TrafficClass() != 3 {
		t.Errorf("UD variant %#x %#x %+v", qpn, qkey, got2)
	}
}

// FuzzDecodeSendWQE: decoding arbitrary stride-sized bytes never panics,
// never returns more SGEs than allowed or than fit, and re-encoding a
// successfully decoded WQE reproduces the bytes it was decoded from.
func FuzzDecodeSendWQE(f *testing.F) {
	f.Add(make([]byte, 128), uint32(1))
	f.Add(make([]byte, 80), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, maxSGE uint32) {
		maxSGE %= 64
		w, err := DecodeSendWQE(b, maxSGE)
		if err != nil {
			return
		}
		if uint32(len(w.SGE)) > maxSGE || SendWQEHdrSize+SGESize*len(w.SGE) > len(b) {
			t.Fatalf("%d SGEs from %d bytes (max %d)", len(w.SGE), len(b), maxSGE)
		}
		out := make([]byte, SendWQEHdrSize+SGESize*len(w.SGE))
		w.Encode(out)
		want := append([]byte(nil), b[:len(out)]...)
		clear(want[12:16]) // total_len: ignored
		clear(want[28:32]) // reserved
		if diff := cmp.Diff(want, out); diff != "" {
			t.Fatalf("re-encode differs:\n%s", diff)
		}
		// Into a reused buffer (stale SGEs in it, or too small): the same.
		stale := []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
		for _, buf := range [][]SGE{stale[:0], stale[:1], nil} {
			into, err := DecodeSendWQEInto(b, maxSGE, buf)
			if err != nil || !cmp.Equal(into, w, cmpopts.EquateEmpty()) {
				t.Fatalf("DecodeSendWQEInto (buffer of %d): %+v, %v; DecodeSendWQE: %+v", cap(buf), into, err, w)
			}
		}
	})
}

// FuzzDecodeRecvWQE is the receive-side counterpart.
func FuzzDecodeRecvWQE(f *testing.F) {
	f.Add(make([]byte, 32), uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, maxSGE uint32) {
		maxSGE %= 64
		w, err := DecodeRecvWQE(b, maxSGE)
		if err != nil {
			return
		}
		if uint32(len(w.SGE)) > maxSGE || RecvWQEHdrSize+SGESize*len(w.SGE) > len(b) {
			t.Fatalf("%d SGEs from %d bytes", len(w.SGE), len(b))
		}
		stale := []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
		for _, buf := range [][]SGE{stale[:0], stale[:1], nil} {
			into, err := DecodeRecvWQEInto(b, maxSGE, buf)
			if err != nil || !cmp.Equal(into, w, cmpopts.EquateEmpty()) {
				t.Fatalf("DecodeRecvWQEInto (buffer of %d): %+v, %v; DecodeRecvWQE: %+v", cap(buf), into, err, w)
			}
		}
		out := make([]byte, RecvWQEHdrSize+SGESize*len(w.SGE))
		w.Encode(out)
		want := append([]byte(nil), b[:len(out)]...)
		clear(want[12:16])
		if diff := cmp.Diff(want, out); diff != "" {
			t.Fatalf("re-encode differs:\n%s", diff)
		}
	})
}
