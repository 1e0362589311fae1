package mlx5

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRecvWQEGolden: an RQ WQE as mlx5_post_recv writes it (zero-length
// SGEs skipped, the terminator after the last one when the stride has
// room) and an SRQ WQE as mlx5_post_srq_recv does (next segment first;
// zero-length SGEs kept).
func TestRecvWQEGolden(t *testing.T) {
	rq := unhex(t, `
		00000100 00001111 00000000 00010000
		00000000 00000100 00000000 00000000
		deadbeef deadbeef deadbeef deadbeef
		deadbeef deadbeef deadbeef deadbeef`)
	w, err := DecodeRecvWQE(rq, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(RecvWQE{Data: []DataSeg{{0x100, 0x1111, 0x10000}}}, w); diff != "" {
		t.Fatalf("RQ (-want +got):\n%s", diff)
	}
	srq := unhex(t, `
		00000007 00000000 00000000 00000000
		00000000 00002222 00000000 00020000
		00000040 00002222 00000000 00030000
		00000000 00000100 00000000 00000000`)
	w, err = DecodeRecvWQE(srq, true)
	if err != nil {
		t.Fatal(err)
	}
	want := RecvWQE{Next: SRQNextSeg{NextWQEIndex: 7}, Data: []DataSeg{{0, 0x2222, 0x20000}, {0x40, 0x2222, 0x30000}}}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Fatalf("SRQ (-want +got):\n%s", diff)
	}
	out := make([]byte, len(srq))
	if !want.Encode(out, true) || !cmp.Equal(out, srq) {
		t.Fatalf("SRQ encoded\n% x", out)
	}
	// A full WQE has no terminator: the stride ends the list.
	full := RecvWQE{Data: []DataSeg{{1, 2, 3}, {4, 5, 6}}}
	b := make([]byte, 32)
	if !full.Encode(b, false) {
		t.Fatal("full WQE does not fit")
	}
	if got, err := DecodeRecvWQE(b, false); err != nil || !cmp.Equal(got, full) {
		t.Fatalf("full WQE: %+v %v", got, err)
	}
	if full.Encode(b[:16], false) {
		t.Fatal("two segments fit in 16 bytes")
	}
	for _, bad := range [][]byte{nil, make([]byte, 8), make([]byte, 24)} {
		if _, err := DecodeRecvWQE(bad, true); !errors.Is(err, ErrWQE) {
			t.Errorf("%d bytes: %v", len(bad), err)
		}
	}
	// SRQ of one segment: the next segment and nothing else.
	if got, err := DecodeRecvWQE(srq[:16], true); err != nil || got.Next.NextWQEIndex != 7 || len(got.Data) != 0 {
		t.Errorf("16-byte SRQ WQE: %+v %v", got, err)
	}
	if q := (RQ{LogSize: 4, StrideShift: 6}); q.Size() != 1024 || q.Offset(0x11) != 64 || q.Offset(0xffff) != 15*64 {
		t.Errorf("RQ geometry %d %d", q.Size(), q.Offset(0x11))
	}
}

// FuzzDecodeRecvWQE: any slot decodes or fails with ErrWQE; the entries
// decoded are the slot's up to the first InvalidLKey; encoding them back
// gives a slot that decodes the same.
func FuzzDecodeRecvWQE(f *testing.F) {
	f.Add(unhex(f, "00000100 00001111 00000000 00010000 00000000 00000100 00000000 00000000"), false)
	f.Add(unhex(f, "00000007 00000000 00000000 00000000 00000000 00000100 00000000 00000000"), true)
	f.Fuzz(func(t *testing.T, b []byte, srq bool) {
		w, err := DecodeRecvWQE(b, srq)
		if err != nil {
			if !errors.Is(err, ErrWQE) {
				t.Fatalf("error %v", err)
			}
			return
		}
		// Reference: walk the slot entry by entry.
		off := 0
		if srq {
			off = 16
		}
		var want []DataSeg
		for ; off+16 <= len(b); off += 16 {
			e := b[off : off+16]
			lkey := uint32(e[4])<<24 | uint32(e[5])<<16 | uint32(e[6])<<8 | uint32(e[7])
			if lkey == 0x100 {
				break
			}
			want = append(want, DataSeg{ByteCount: be.Uint32(e), LKey: lkey, Addr: be.Uint64(e[8:])})
		}
		if diff := cmp.Diff(want, w.Data, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("entries (-want +got):\n%s", diff)
		}
		out := make([]byte, len(b))
		if !w.Encode(out, srq) {
			t.Fatal("decoded WQE does not fit its slot")
		}
		again, err := DecodeRecvWQE(out, srq)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
