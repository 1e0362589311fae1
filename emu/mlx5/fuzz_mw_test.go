package mlx5

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// mwModel is the fuzzer's model of a memory window (spec §6.4, §7.5.7):
// its key and type, whether it is bound, and, bound, its range, access
// and where in which region the range lands.
type mwModel struct {
	key          uint32
	type2, other bool // other: of another PD than the QPs'
	valid        bool
	start, n     uint64
	access       uint32 // mlx5test.MW* flags
	qpn          uint32 // bound, type 2: the QP it was bound through
	region       int    // index into the fuzzer's regions
	addr         uint64 // region address of window byte start
}

// mwRegion is one of the fuzzer's memory regions over b's buffers.
type mwRegion struct {
	key       uint32
	start, n  uint64
	lw        bool
	exists    bool
	bufOffset uint64 // its start's offset in b's buffers
}

// mwBindExpect is the model's outcome of bind (as BindMWWQE lays it out)
// posted on QP qpn: whether it succeeds, and the window after it.
func mwBindExpect(w mwModel, regions []mwRegion, bind mlx5test.Bind, qpn uint32) (bool, mwModel) {
	if bind.MW != w.key || w.other || bind.Type2 != w.type2 {
		return false, w
	}
	n := w
	if bind.Len == 0 { // type-1 unbind or LOCAL_INV
		if w.type2 && w.valid && w.qpn != qpn { // CHECK_QPN: the posting QP
			return false, w
		}
		n.valid = false
		if !w.type2 {
			n.key = w.key&^0xff | uint32(bind.NewKey)
		}
		return true, n
	}
	if w.type2 && (w.valid || bind.QPN != qpn) {
		return false, w
	}
	ri := -1
	for i, r := range regions {
		if r.exists && r.key == bind.MRKey {
			ri = i
		}
	}
	if ri < 0 {
		return false, w
	}
	r := regions[ri]
	if bind.Addr < r.start || bind.Addr-r.start > r.n || bind.Len > r.n-(bind.Addr-r.start) {
		return false, w
	}
	if bind.Access&(mlx5test.MWLocalWrite|mlx5test.MWRemoteWrite|mlx5test.MWRemoteAtomic) != 0 && !r.lw {
		return false, w
	}
	n.valid, n.n, n.region, n.addr = true, bind.Len, ri, bind.Addr
	n.access = bind.Access &^ mlx5test.MWZeroBased
	n.start = bind.Addr
	if bind.Access&mlx5test.MWZeroBased != 0 {
		n.start = 0
	}
	n.key = w.key&^0xff | uint32(bind.NewKey)
	n.qpn = qpn
	return true, n
}

// FuzzMWBind drives memory windows on device b from the program: binds
// (type 1 and 2, zero-based or not, to either of two regions or a key
// that names none, anywhere in or past them, any access), type-1 unbinds
// and LOCAL_INVs posted on b's RC QP, with right or wrong window keys
// and QPNs, over windows of both types and one of another PD; and RDMA
// WRITEs and READs from a's connected QP through a window's current or
// a stale key, in and out of its range. Oracle: a model of the windows
// (mwBindExpect, the spec's reading): every bind completes as the model
// says (a REQ CQE of opcode UMR, or MW_BIND_ERR / LOC_QP_OP_ERR), every
// RDMA succeeds exactly when the model's window is bound under that key,
// covers the range and grants the access, a WRITE's bytes land where the
// model's window maps them and a READ returns the bytes there; the
// program ends at the first error completion (the QPs are in ERR).
func FuzzMWBind(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 0x10, 0, 0x00, 0x10, 7, 0, 0x03, 0, 0, 0, 0x40, 0, 0, 0x10})
	f.Add([]byte{0x24, 0x3c, 0x00, 0, 0x00, 0x20, 9, 0, 0x07, 0, 0, 0, 0x80, 0, 0, 0x20, 0x26, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x20, 0x78, 0x08, 0, 0x00, 0x08, 1, 0, 0x23, 0, 0, 0, 0x10, 0, 0, 0x30, 0x21, 0, 0, 0, 0, 0, 0x41, 0})
	f.Add([]byte{0x00, 0x3d, 0x00, 0, 0x00, 0x10, 2, 0, 0x00, 0x02, 0, 0, 0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		a, b := rcPair(t)
		defer a.d.Close()
		defer b.d.Close()
		ro, err := b.drv.CreateMkey(b.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: b.pd, Mode: ifc.MkcAccessModeMTT, Access: 4,
			Start: b.data + 8192, Len: 8192, LogPageSize: 12, MTT: []uint64{b.data + 8192, b.data + 12288}}))
		if err != nil {
			t.Fatal(err)
		}
		regions := []mwRegion{
			{key: b.key, start: b.data, n: 64 << 10, lw: true, exists: true},
			{key: ro.Key, start: b.data + 8192, n: 8192, exists: true, bufOffset: 8192},
			{key: ro.Key ^ 0x55, exists: false},
		}
		other, err := b.drv.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		var ws []mwModel
		for _, m := range []struct {
			pd           uint32
			type2, other bool
		}{{b.pd, false, false}, {b.pd, true, false}, {other, true, true}} {
			k, err := b.drv.AllocMW(m.pd, m.type2)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, mwModel{key: k.Key, type2: m.type2, other: m.other})
		}
		qpn := b.wq.Q.QPN
		for step := 0; len(prog) >= 8 && step < 10; step++ {
			s := prog[:8]
			prog = prog[8:]
			wi := int(s[0]>>2&3) % len(ws)
			w := ws[wi]
			key := w.key
			if s[0]&0x10 != 0 {
				key ^= uint32(s[7]) | 1 // a stale or wrong variant
			}
			if s[0]&3 == 3 { // RDMA from a through the window
				read := s[0]&0x20 != 0
				n := 1 + (uint32(s[4])|uint32(s[5])<<8)%8192
				va := w.start + uint64(int64(int16(uint16(s[2])|uint16(s[3])<<8)))
				if s[0]&0x40 == 0 {
					va = w.start + uint64(s[2])<<4
				}
				src := a.mem(32768, int(n))
				for i := range src {
					src[i] = byte(step*31 + i)
				}
				r := regions[w.region]
				want := w.valid && key == w.key && va >= w.start && va-w.start <= w.n && uint64(n) <= w.n-(va-w.start)
				if read {
					want = want && w.access&mlx5test.MWRemoteRead != 0
				} else {
					want = want && w.access&mlx5test.MWRemoteWrite != 0
				}
				cqe := rdma(t, a, read, key, va, n)
				got := cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq
				if got != want {
					t.Fatalf("step %d: RDMA read=%v key %#x va %#x n %d through window %+v: ok=%v, the model says %v (%+v)",
						step, read, key, va, n, w, got, want, uverbs.DecodeErrCQE(cqe))
				}
				if !got {
					return
				}
				off := r.bufOffset + (w.addr - r.start) + (va - w.start)
				if !bytes.Equal(a.mem(32768, int(n)), b.mem(off, int(n))) {
					t.Fatalf("step %d: the %d bytes at window %#x are not b's at %#x", step, n, va, off)
				}
				continue
			}
			bind := mlx5test.Bind{MW: key, NewKey: s[6], Type2: s[0]&0x20 != 0, QPN: qpn}
			if s[0]&0x40 != 0 {
				bind.QPN = a.wq.Q.QPN // another QP
			}
			if s[0]&3 != 1 {
				r := regions[int(s[1]&3)%len(regions)]
				bind.MRKey = r.key
				bind.Addr = r.start + uint64(s[2])<<8 - uint64(s[3]&1)<<8
				bind.Len = uint64(s[4]) | uint64(s[5])<<8
				bind.Access = uint32(s[1]>>2) & 0x2f // LW, RW, RR, A, zero-based
			}
			var wqe uverbs.SendWQE
			if s[0]&3 == 2 {
				bind = mlx5test.Bind{MW: key, Type2: true, QPN: qpn}
				wqe = mlx5test.LocalInvWQE(key, true)
			} else {
				wqe = mlx5test.BindMWWQE(bind, true)
			}
			want, next := mwBindExpect(w, regions, bind, qpn)
			idx := b.drv.PostSend(b.wq, &wqe)
			cqe := b.poll(t)
			got := cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq
			if got != want {
				t.Fatalf("step %d: bind %+v of window %+v: ok=%v, the model says %v (%+v)", step, bind, w, got, want, uverbs.DecodeErrCQE(cqe))
			}
			if !got {
				if e := uverbs.DecodeErrCQE(cqe); e.WQECounter != idx || e.Syndrome != uverbs.SyndromeMWBindErr {
					t.Fatalf("step %d: error CQE %+v, want MW_BIND_ERR for WQE %d", step, e, idx)
				}
				return
			}
			ws[wi] = next
			b.d.core.Lock()
			dev := b.d.fn.obj.Region(next.key >> 8)
			ok := dev != nil && dev.LKey == next.key && dev.Valid == next.valid &&
				(!next.valid || dev.Start == next.start && dev.Length == next.n)
			b.d.core.Unlock()
			if !ok {
				t.Fatalf("step %d: window %#x is %+v, the model's %+v", step, next.key, dev, next)
			}
		}
		b.d.core.Lock()
		fatal := b.d.seg.synd != 0
		b.d.core.Unlock()
		if fatal {
			t.Fatal("the device died")
		}
	})
}
