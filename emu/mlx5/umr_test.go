package mlx5

import (
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// umrOf makes the kernel's UMR resources on e's device (its writes to
// guest memory under the device lock, as e's own).
func umrOf(t testing.TB, e *rcEnd) *mlx5test.UMR {
	t.Helper()
	u, err := e.drv.UMRResources()
	if err != nil {
		t.Fatal(err)
	}
	u.WQ.Hold = e.wq.Hold
	return u
}

// postUMR posts w on the UMR QP and waits for its CQE.
func postUMR(t testing.TB, e *rcEnd, u *mlx5test.UMR, w uverbs.SendWQE) (uint16, []byte) {
	t.Helper()
	idx := e.drv.PostUMR(u, &w)
	for range 2000 {
		e.d.Sync()
		e.d.core.Lock()
		cqe, ok := e.drv.PollUMR(u)
		e.d.core.Unlock()
		if ok {
			return idx, cqe
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no UMR CQE")
	return 0, nil
}

// umrOK posts w and checks it completes with a REQ CQE of opcode UMR.
func umrOK(t testing.TB, e *rcEnd, u *mlx5test.UMR, w uverbs.SendWQE) {
	t.Helper()
	idx, b := postUMR(t, e, u, w)
	if b[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
		t.Fatalf("UMR: error CQE %+v", uverbs.DecodeErrCQE(b))
	}
	if c := uverbs.DecodeCQE(b); c.SOpcode != uverbs.OpcodeUMR || c.WQECounter != idx || c.QPN != u.WQ.Q.QPN {
		t.Fatalf("UMR CQE %+v, want opcode %#x wqe %d qpn %#x", c, uverbs.OpcodeUMR, idx, u.WQ.Q.QPN)
	}
}

// umrFails posts w and checks it completes with an error CQE of syndrome
// synd, the QP then in ERR; a barrier WQE posted then is flushed (the
// kernel's recovery) and the QP recovered to RTS.
func umrFails(t testing.TB, e *rcEnd, u *mlx5test.UMR, w uverbs.SendWQE, synd uint8) {
	t.Helper()
	idx, b := postUMR(t, e, u, w)
	ec := uverbs.DecodeErrCQE(b)
	if ec.Opcode != uverbs.CQEReqErr || ec.Syndrome != synd || ec.WQECounter != idx || ec.SWQEOpcode != uverbs.OpcodeUMR {
		t.Fatalf("UMR error CQE %+v, want syndrome %#x wqe %d", ec, synd, idx)
	}
	if _, st, _ := e.d.QPState(u.WQ.Q.QPN); st != transport.StateErr {
		t.Fatalf("UMR QP %v after an error CQE, want ERR", st)
	}
	idx, b = postUMR(t, e, u, w) // mlx5r_umr_recover's barrier: the failed WQE again
	if ec := uverbs.DecodeErrCQE(b); ec.Syndrome != uverbs.SyndromeWRFlushErr || ec.WQECounter != idx {
		t.Fatalf("barrier CQE %+v, want a flush", ec)
	}
	if err := e.drv.UMRRecover(u); err != nil {
		t.Fatalf("UMR recovery: %v", err)
	}
}

// mkeyState is what a UMR may change of an mkey.
type mkeyState struct {
	pd, access, key uint32
	valid           bool
	gen             uint64
	start, length   uint64
	shift           uint8
}

func mkeyOf(e *rcEnd, key uint32) mkeyState { return mkeyOfDev(e.d, key) }

// reconnect takes both QPs back to RST and connects them again (after a
// remote access error).
func reconnect(t *testing.T, a, b *rcEnd) {
	t.Helper()
	for _, e := range []*rcEnd{a, b} {
		if err := e.drv.ToRST(e.wq.Q); err != nil {
			t.Fatal(err)
		}
		e.wq.SQPI, e.wq.RQPI = 0, 0
		e.wq.Hold(func() { clear(e.drv.Bytes(e.wq.Q.DBR, 8)) })
	}
	time.Sleep(20 * time.Millisecond)
	for _, e := range []*rcEnd{a, b} {
		for {
			if _, ok := e.pollOnce(); !ok {
				break
			}
		}
	}
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
}

// write posts a signaled RDMA WRITE of 256 bytes from a into b's buffer
// at off through rkey, and returns its CQE.
func write(t *testing.T, a, b *rcEnd, off uint64, rkey uint32) []byte {
	t.Helper()
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + off, RKey: rkey},
		Data: []uverbs.DataSeg{a.seg(0, 256)}})
	return a.poll(t)
}

func wantWriteOK(t *testing.T, cqe []byte) {
	t.Helper()
	if cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
		t.Fatalf("RDMA WRITE: %+v", uverbs.DecodeErrCQE(cqe))
	}
}

func wantRemoteAccess(t *testing.T, cqe []byte) {
	t.Helper()
	if e := uverbs.DecodeErrCQE(cqe); e.Opcode != uverbs.CQEReqErr || e.Syndrome != uverbs.SyndromeRemoteAccessErr {
		t.Fatalf("RDMA WRITE CQE %+v, want REMOTE_ACCESS_ERR", e)
	}
}

// allAccess is the MkeyArgs numbering's lw|rw|rr|a.
const allAccess = 0xf

// TestUMRReregAccess: ibv_rereg_mr of the access flags (Linux 6.12's
// mlx5r_umr_rereg_pd_access on the REG_UMR QP): without remote write a
// peer's RDMA WRITE through the key fails with a remote access error;
// with it back, it works. Each UMR completes with a REQ CQE of opcode
// UMR; the region's generation changes with it.
func TestUMRReregAccess(t *testing.T) {
	a, b := rcPair(t)
	u := umrOf(t, b)
	wantWriteOK(t, write(t, a, b, 0, b.key))
	before := mkeyOf(b, b.key)
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, b.pd, allAccess&^2)) // no remote write
	after := mkeyOf(b, b.key)
	if after.access != mr.LocalWrite|mr.RemoteRead|mr.RemoteAtomic || after.pd != b.pd || !after.valid || after.key != b.key || after.gen == before.gen {
		t.Fatalf("mkey after the rereg %+v (before %+v)", after, before)
	}
	wantRemoteAccess(t, write(t, a, b, 0, b.key))
	reconnect(t, a, b)
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, b.pd, allAccess))
	wantWriteOK(t, write(t, a, b, 4096, b.key))
	// The same flags again change nothing: the generation stays.
	g := mkeyOf(b, b.key).gen
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, b.pd, allAccess))
	if mkeyOf(b, b.key).gen != g {
		t.Fatal("a UMR changing nothing gave the region a new generation")
	}
	exchange(t, a, b)
}

// TestUMRReregPD: ibv_rereg_mr of the PD: the key leaves its PD's QP
// (a WRITE through b's QP fails) for the new PD's (through c's QP, in
// that PD, it works); the PDs' references follow the key.
func TestUMRReregPD(t *testing.T) {
	a, b := rcPair(t)
	c := b.another(t)
	u := umrOf(t, b)
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, c.pd, allAccess))
	wantRemoteAccess(t, write(t, a, b, 0, b.key))
	// a to c's QP: b.key now in c's PD.
	if err := a.drv.ToRST(a.wq.Q); err != nil {
		t.Fatal(err)
	}
	a.wq.SQPI, a.wq.RQPI = 0, 0
	a.wq.Hold(func() { clear(a.drv.Bytes(a.wq.Q.DBR, 8)) })
	time.Sleep(20 * time.Millisecond)
	for {
		if _, ok := a.pollOnce(); !ok {
			break
		}
	}
	a.connect(t, c.lid, c.wq.Q.QPN)
	c.connect(t, a.lid, a.wq.Q.QPN)
	wantWriteOK(t, write(t, a, b, 0, b.key))
	// A PD the key moved to is busy until it moves away.
	x, err := b.drv.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, x, allAccess))
	if err := b.drv.DeallocPD(x); !isStatus(err, ifc.StatResBusy) {
		t.Fatalf("DEALLOC_PD of the key's new PD: %v", err)
	}
	umrOK(t, b, u, mlx5test.ReregPDAccessWQE(b.key, b.pd, allAccess))
	if err := b.drv.DeallocPD(x); err != nil {
		t.Fatalf("DEALLOC_PD of the PD the key left: %v", err)
	}
}

// TestUMRErrors: UMRs the device refuses complete with an error CQE and
// change nothing; the QP goes to ERR, flushes the barrier WQE the
// kernel's recovery posts, and works again after RESET→RTS. Then the
// revoke (free, the UMR PD) and the enable that undoes it.
func TestUMRErrors(t *testing.T) {
	a, b := rcPair(t)
	u := umrOf(t, b)
	st := mkeyOf(b, b.key)
	rereg := mlx5test.ReregPDAccessWQE(b.key, b.pd, 0)
	withMask := func(w uverbs.SendWQE, mask uint64) uverbs.SendWQE { w.UMRCtrl.MkeyMask |= mask; return w }
	withFlags := func(w uverbs.SendWQE, flags uint8) uverbs.SendWQE { w.UMRCtrl.Flags = flags; return w }
	onKey := func(w uverbs.SendWQE, key uint32) uverbs.SendWQE { w.Ctrl.Imm = key; return w }
	pa := b.ib.P0Key.Key // the kernel's DMA key: umr_en 0
	for _, c := range []struct {
		name string
		w    uverbs.SendWQE
		synd uint8
	}{
		{"wrong variant", onKey(rereg, b.key^1), uverbs.SyndromeLocalProtErr},
		{"no such mkey", onKey(rereg, 0xabcd00), uverbs.SyndromeLocalProtErr},
		{"umr_en 0", onKey(rereg, pa), uverbs.SyndromeLocalProtErr},
		{"no such PD", mlx5test.ReregPDAccessWQE(b.key, 0x3333, 0), uverbs.SyndromeLocalProtErr},
		{"check not free on a live mkey", withFlags(rereg, uverbs.UMRCtrlFlagCheckFree|uverbs.UMRCtrlFlagInline), uverbs.SyndromeLocalProtErr},
		{"empty range", withMask(rereg, uverbs.MkeyMaskLen|uverbs.MkeyMaskStartAddr), uverbs.SyndromeLocalProtErr},
		{"QPN", withMask(rereg, uverbs.MkeyMaskQPN), uverbs.SyndromeLocalQPOpErr},
		{"check QPN flag", withFlags(rereg, uverbs.UMRCtrlFlagCheckQPN), uverbs.SyndromeLocalQPOpErr},
		{"free-check mode 3", withFlags(rereg, 3<<5), uverbs.SyndromeLocalQPOpErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			umrFails(t, b, u, c.w, c.synd)
			if got := mkeyOf(b, b.key); got != st {
				t.Fatalf("mkey %+v after a failed UMR, was %+v", got, st)
			}
		})
	}
	// A malformed UMR WQE (a translation announced, none there).
	bad := rereg
	bad.UMRCtrl.KLMOctowords = 4
	umrFails(t, b, u, bad, uverbs.SyndromeLocalLengthErr)
	wantWriteOK(t, write(t, a, b, 0, b.key))

	// The revoke: free, in the UMR PD; the key names nothing then, and a
	// rereg ("fail if free") fails.
	umrOK(t, b, u, mlx5test.RevokeWQE(b.key, b.ib.UMRPD))
	if got := mkeyOf(b, b.key); got.valid || got.pd != b.ib.UMRPD {
		t.Fatalf("revoked mkey %+v", got)
	}
	wantRemoteAccess(t, write(t, a, b, 0, b.key))
	reconnect(t, a, b)
	umrFails(t, b, u, mlx5test.ReregPDAccessWQE(b.key, b.pd, allAccess), uverbs.SyndromeLocalProtErr)
	// Enabled again ("fail unless free", FREE and PD), it works.
	enable := mlx5test.UMRWQE(b.key, uverbs.UMRCtrlSeg{Flags: uverbs.UMRCtrlFlagCheckFree | uverbs.UMRCtrlFlagInline,
		MkeyMask: uverbs.MkeyMaskFree | uverbs.MkeyMaskPD}, uverbs.MkeyContextSeg{FlagsPD: b.pd})
	umrOK(t, b, u, enable)
	wantWriteOK(t, write(t, a, b, 0, b.key))
	// A new variant (mkey_mask KEY): the old key names nothing.
	next := b.key&^0xff | (b.key+1)&0xff
	umrOK(t, b, u, mlx5test.UMRWQE(b.key, uverbs.UMRCtrlSeg{Flags: uverbs.UMRCheckFree | uverbs.UMRCtrlFlagInline,
		MkeyMask: uverbs.MkeyMaskMkey}, uverbs.MkeyContextSeg{QPNMkey: 0xffffff00 | next&0xff}))
	wantWriteOK(t, write(t, a, b, 0, next))
	wantRemoteAccess(t, write(t, a, b, 0, b.key))
}

// TestUMRUserQP: a UMR WQE on a user RC QP (a memory-window bind) stays
// refused: LOC_QP_OP_ERR, the mkey unchanged.
func TestUMRUserQP(t *testing.T) {
	a, b := rcPair(t)
	st := mkeyOf(a, a.key)
	w := mlx5test.RevokeWQE(a.key, a.pd)
	w.Ctrl.FMCESE = signaled
	idx := a.drv.PostSend(a.wq, &w)
	if e := uverbs.DecodeErrCQE(a.poll(t)); e.Syndrome != uverbs.SyndromeLocalQPOpErr || e.WQECounter != idx {
		t.Fatalf("UMR on an RC QP: %+v", e)
	}
	if got := mkeyOf(a, a.key); got != st {
		t.Fatalf("mkey %+v after a user UMR, was %+v", got, st)
	}
	b.noCQE(t)
}
