package mlx5

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Memory windows (mw.go) with the fake driver: b allocates and binds a
// window over part of its buffers' region, a reaches it by RDMA.

// mwOff and mwLen are the window's range in b's buffers.
const mwOff, mwLen = 4096, 8192

// allocMW allocates a window of type 1 or 2 on e's PD.
func (e *rcEnd) allocMW(t *testing.T, type2 bool) uint32 {
	t.Helper()
	m, err := e.drv.AllocMW(e.pd, type2)
	if err != nil {
		t.Fatal(err)
	}
	return m.Key
}

// bindArgs is a bind of window mw over [mwOff, +mwLen) of e's region,
// remote read, write and atomic, the key advanced.
func (e *rcEnd) bindArgs(mw uint32, type2 bool) mlx5test.Bind {
	return mlx5test.Bind{MW: mw, MRKey: e.key, NewKey: uint8(mlx5test.IncRKey(mw)), Type2: type2, QPN: e.wq.Q.QPN,
		Addr: e.data + mwOff, Len: mwLen,
		Access: mlx5test.MWLocalWrite | mlx5test.MWRemoteWrite | mlx5test.MWRemoteRead | mlx5test.MWRemoteAtomic}
}

// post posts w on e's QP (signaled) and returns its CQE.
func (e *rcEnd) post(t *testing.T, w uverbs.SendWQE) (uint16, []byte) {
	t.Helper()
	w.Ctrl.FMCESE |= signaled
	idx := e.drv.PostSend(e.wq, &w)
	return idx, e.poll(t)
}

// bind binds as b says and checks the success CQE; it returns the new key.
func (e *rcEnd) bind(t *testing.T, b mlx5test.Bind) uint32 {
	t.Helper()
	idx, cqe := e.post(t, mlx5test.BindMWWQE(b, true))
	checkReq(t, cqe, e.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
	return b.MW&^0xff | uint32(b.NewKey)
}

// rdma posts an RDMA WRITE (or READ) of n bytes from a's buffers at 32
// KiB to remote address va under rkey and returns the CQE.
func rdma(t *testing.T, a *rcEnd, read bool, rkey uint32, va uint64, n uint32) []byte {
	t.Helper()
	op := uint8(uverbs.OpcodeRDMAWrite)
	if read {
		op = uverbs.OpcodeRDMARead
	}
	_, cqe := a.post(t, uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: op}, Segs: uverbs.HasRAddr,
		RAddr: uverbs.RAddrSeg{RAddr: va, RKey: rkey}, Data: []uverbs.DataSeg{a.seg(32768, n)}})
	return cqe
}

// wantSyndrome checks an error CQE's syndrome.
func wantSyndrome(t *testing.T, cqe []byte, synd uint8) {
	t.Helper()
	if cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq {
		t.Fatalf("success CQE %+v, want syndrome %#x", uverbs.DecodeCQE(cqe), synd)
	}
	if e := uverbs.DecodeErrCQE(cqe); e.Syndrome != synd {
		t.Fatalf("error CQE %+v, want syndrome %#x", e, synd)
	}
}

// wantOK checks a success CQE.
func wantOK(t *testing.T, cqe []byte) {
	t.Helper()
	if cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
		t.Fatalf("error CQE %+v", uverbs.DecodeErrCQE(cqe))
	}
}

// TestMWBindAccess: a window of either type, bound over part of b's
// region, takes a's RDMA WRITE and READ inside its range, through to the
// region's memory (and a zero-based window maps its offset 0 to the bind
// address); an access beyond its range, or by the window's key before the
// bind, is a remote access error.
func TestMWBindAccess(t *testing.T) {
	for _, tc := range []struct {
		name         string
		type2, zero  bool
		va           uint64 // remote address of window byte 0
		off          uint64 // where the access starts in the window
		n            uint32
		read, before bool
		fail         bool
	}{
		{name: "type 1 write", off: 100, n: 2000},
		{name: "type 2 write", type2: true, off: 0, n: mwLen},
		{name: "type 1 read", read: true, off: 6000, n: 2000},
		{name: "type 2 zero-based read", type2: true, zero: true, read: true, off: 10, n: 3000},
		{name: "type 1 write past the end", off: mwLen - 100, n: 200, fail: true},
		{name: "type 2 read before the start", type2: true, off: ^uint64(0), n: 16, read: true, fail: true},
		{name: "type 1 key before the bind", n: 64, before: true, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rcPair(t)
			mw := b.allocMW(t, tc.type2)
			args := b.bindArgs(mw, tc.type2)
			if tc.zero {
				args.Access |= mlx5test.MWZeroBased
			}
			key := mw
			if !tc.before {
				key = b.bind(t, args)
			}
			base := b.data + mwOff
			if tc.zero {
				base = 0
			}
			for i := range tc.n {
				a.mem(32768, int(tc.n))[i] = byte(i*3 + 1)
				b.mem(mwOff, mwLen)[(tc.off+uint64(i))%mwLen] = byte(i*5 + 2)
			}
			cqe := rdma(t, a, tc.read, key, base+tc.off, tc.n)
			if tc.fail {
				wantSyndrome(t, cqe, uverbs.SyndromeRemoteAccessErr)
				return
			}
			wantOK(t, cqe)
			if !bytes.Equal(a.mem(32768, int(tc.n)), b.mem(mwOff+tc.off, int(tc.n))) {
				t.Fatal("data differ")
			}
		})
	}
}

// TestMWInvalidate: after a type-2 window's LOCAL_INV on b, a's SEND
// WITH INVALIDATE of its key (b's receive CQE says so, with the key), a
// type-1 unbind (ibv_bind_mw of length 0, the key advanced), a rebind of
// a type-1 window (the old key) or DEALLOC_MW, the old key is a remote
// access error; the region itself is still reached by its own key.
func TestMWInvalidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		type2 bool
		kill  func(t *testing.T, a, b *rcEnd, mw, key uint32)
	}{
		{"LOCAL_INV", true, func(t *testing.T, a, b *rcEnd, mw, key uint32) {
			idx, cqe := b.post(t, mlx5test.LocalInvWQE(key, true))
			checkReq(t, cqe, b.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
		}},
		{"SEND_WITH_INV", true, func(t *testing.T, a, b *rcEnd, mw, key uint32) {
			b.drv.PostRecv(b.wq, b.seg(40000, 256))
			_, cqe := a.post(t, uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSendInval, Imm: key},
				Data: []uverbs.DataSeg{a.seg(0, 64)}})
			wantOK(t, cqe)
			rc := b.poll(t)
			if c := uverbs.DecodeCQE(rc); rc[uverbs.OpOwnOffset]>>4 != uverbs.CQERespSendInv || c.ImmInvalPkey != key {
				t.Fatalf("receive CQE %+v op %#x", c, rc[uverbs.OpOwnOffset]>>4)
			}
		}},
		{"type 1 unbind", false, func(t *testing.T, a, b *rcEnd, mw, key uint32) {
			b.bind(t, mlx5test.Bind{MW: key, NewKey: uint8(mlx5test.IncRKey(key))})
		}},
		{"type 1 rebind", false, func(t *testing.T, a, b *rcEnd, mw, key uint32) {
			b.bind(t, b.bindArgs(key, false))
		}},
		{"DEALLOC_MW", true, func(t *testing.T, a, b *rcEnd, mw, key uint32) {
			if err := b.drv.DestroyMkey(mlx5test.Mkey{Key: mw}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rcPair(t)
			mw := b.allocMW(t, tc.type2)
			key := b.bind(t, b.bindArgs(mw, tc.type2))
			wantOK(t, rdma(t, a, false, key, b.data+mwOff, 64))
			tc.kill(t, a, b, mw, key)
			wantOK(t, rdma(t, a, false, b.key, b.data+mwOff, 64)) // the region's own key
			wantSyndrome(t, rdma(t, a, false, key, b.data+mwOff, 64), uverbs.SyndromeRemoteAccessErr)
		})
	}
}

// TestMWBadBind: a bind the device refuses completes with an error CQE
// of syndrome MW_BIND_ERR (the provider's IBV_WC_MW_BIND_ERR) on the
// binding QP, which goes to ERR; the window stays unbound. A UMR WQE in a
// form the provider never posts is LOC_QP_OP_ERR.
func TestMWBadBind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		type2 bool
		edit  func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE)
		synd  uint8
	}{
		{"wrong window key", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			w.Ctrl.Imm ^= 0x80
		}, uverbs.SyndromeMWBindErr},
		{"not a window", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			w.Ctrl.Imm = b.key
		}, uverbs.SyndromeMWBindErr},
		{"window of another PD", true, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			pd, err := b.drv.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			w.Ctrl.Imm = b.allocMWOn(t, pd, true)
		}, uverbs.SyndromeMWBindErr},
		{"region of another PD", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			other := b.another(t)
			*w = mlx5test.BindMWWQE(mlx5test.Bind{MW: args.MW, MRKey: other.key, NewKey: args.NewKey,
				Addr: other.data, Len: 4096, Access: mlx5test.MWRemoteRead}, true)
		}, uverbs.SyndromeMWBindErr},
		{"no such region", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			args.MRKey ^= 1
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"range beyond the region", true, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			args.Addr, args.Len = b.data+60<<10, 8192
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"remote write on a region without local write", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			ro, err := b.drv.CreateMkey(b.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: b.pd, Mode: ifc.MkcAccessModeMTT, Access: 4,
				Start: b.data, Len: 4096, LogPageSize: 12, MTT: []uint64{b.data}}))
			if err != nil {
				t.Fatal(err)
			}
			args.MRKey, args.Addr, args.Len, args.Access = ro.Key, b.data, 4096, mlx5test.MWRemoteWrite
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"type 2 bound already", true, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			key := b.bind(t, *args)
			args.MW, args.NewKey = key, uint8(mlx5test.IncRKey(key))
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"type 2 to another QP", true, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			args.QPN = a.wq.Q.QPN
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"type 1 bind of a type 2 window", true, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			args.Type2 = false
			*w = mlx5test.BindMWWQE(*args, true)
		}, uverbs.SyndromeMWBindErr},
		{"LOCAL_INV of a type 1 window", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			*w = mlx5test.LocalInvWQE(args.MW, true)
		}, uverbs.SyndromeMWBindErr},
		{"KLM length differs", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			w.Mkey.Len++
		}, uverbs.SyndromeMWBindErr},
		{"unknown mkey_mask bit", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			w.UMRCtrl.MkeyMask |= uverbs.MkeyMaskPD
		}, uverbs.SyndromeLocalQPOpErr},
		{"two KLMs", false, func(t *testing.T, a, b *rcEnd, args *mlx5test.Bind, w *uverbs.SendWQE) {
			w.Translation[16] = 1
		}, uverbs.SyndromeLocalQPOpErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rcPair(t)
			mw := b.allocMW(t, tc.type2)
			args := b.bindArgs(mw, tc.type2)
			w := mlx5test.BindMWWQE(args, true)
			tc.edit(t, a, b, &args, &w)
			idx := b.drv.PostSend(b.wq, &w)
			e := uverbs.DecodeErrCQE(b.poll(t))
			if b.d.Sync(); e.Opcode != uverbs.CQEReqErr || e.Syndrome != tc.synd || e.WQECounter != idx || e.SWQEOpcode != uverbs.OpcodeUMR {
				t.Fatalf("CQE %+v, want syndrome %#x", e, tc.synd)
			}
			if _, st, _ := b.d.QPState(b.wq.Q.QPN); st != transport.StateErr {
				t.Fatalf("QP state %v, want ERR", st)
			}
			b.d.core.Lock()
			valid := b.d.fn.obj.Region(mw >> 8).Valid
			b.d.core.Unlock()
			if valid && tc.name != "type 2 bound already" {
				t.Fatal("the window was bound")
			}
		})
	}
}

// allocMWOn allocates a window on PD pd of e's device.
func (e *rcEnd) allocMWOn(t *testing.T, pd uint32, type2 bool) uint32 {
	t.Helper()
	m, err := e.drv.AllocMW(pd, type2)
	if err != nil {
		t.Fatal(err)
	}
	return m.Key
}

// TestMWRegionGone: a window bound to a region that is deregistered
// reaches nothing (its KLM names the region's key, and the key is gone).
func TestMWRegionGone(t *testing.T) {
	a, b := rcPair(t)
	mw := b.allocMW(t, false)
	key := b.bind(t, b.bindArgs(mw, false))
	if err := b.drv.DestroyMkey(mlx5test.Mkey{Key: b.key}); err != nil {
		t.Fatal(err)
	}
	wantSyndrome(t, rdma(t, a, false, key, b.data+mwOff, 64), uverbs.SyndromeRemoteAccessErr)
}

// TestMWUC: a type-2 window bound on a UC QP takes the peer's UC WRITE
// through it; after its LOCAL_INV a WRITE by its key lands nowhere (UC
// drops what the responder refuses: the requester's CQE is a success).
func TestMWUC(t *testing.T) {
	a, b := ucPair(t, subnet.New(subnet.Config{}))
	mw := b.allocMW(t, true)
	key := b.bind(t, b.bindArgs(mw, true))
	for i := range 512 {
		a.mem(32768, 512)[i] = byte(i + 9)
	}
	wantOK(t, rdma(t, a, false, key, b.data+mwOff+256, 512))
	b.d.Sync()
	if !bytes.Equal(b.mem(mwOff+256, 512), a.mem(32768, 512)) {
		t.Fatal("UC WRITE through the window: data differ")
	}
	idx, cqe := b.post(t, mlx5test.LocalInvWQE(key, true))
	checkReq(t, cqe, b.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
	clear(b.mem(mwOff, 1024))
	wantOK(t, rdma(t, a, false, key, b.data+mwOff+256, 512))
	b.d.Sync()
	if !bytes.Equal(b.mem(mwOff, 1024), make([]byte, 1024)) {
		t.Fatal("UC WRITE through an invalidated window landed")
	}
}
