package mlx5

import (
	"errors"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// cqeAt is the 64-byte CQE at counter n of a kernel CQ's ring (the fake
// driver's 4 KiB pages).
func cqeAt(drv *mlx5test.Driver, c *mlx5test.CQ, n uint32) []byte {
	off := uverbs.CQ{LogSize: c.LogSize, CQESize: uverbs.CQESize64}.Offset(n)
	return drv.Bytes(c.Pages[off>>12]+off&4095, uverbs.CQESize64)
}

// modifyCQIn is mlx5_ib_resize_cq's MODIFY_CQ for a kernel CQ: a ring of
// 1<<logSize 64-byte CQEs in one 4 KiB page.
func modifyCQIn(cqn uint32, logSize uint8, page uint64) []byte {
	in := make([]byte, ifc.Linux612ModifyCQInSize+8)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpModifyCQ))
	ifc.MboxInOpMod.Set(in, ifc.CQOpModResize)
	ifc.ObjIn.Set(in, cqn)
	ifc.ModifyCQInFieldSelect.Set(in, ifc.ModifyCQMaskLogSize|ifc.ModifyCQMaskPgOffset|ifc.ModifyCQMaskPgSize)
	ifc.CQCLogCQSize.Set(ifc.ModifyCQInCQC.Bytes(in), uint32(logSize))
	be.PutUint64(in[ifc.PASOffset:], page)
	return in
}

// TestCQResize: MODIFY_CQ's resize protocol (spec §6.5) as mlx5_ib's
// copy_resize_cqes and the provider's mlx5_cq_resize_copy_cqes use it.
// With 3 CQEs not consumed, a resize to 2 entries fails with
// BAD_SIZE_OUTS_CQES and changes nothing (pyverbs test_resize_cq asks
// for it on purpose). A resize to 8 entries writes a RESIZE CQE in the
// old ring at the producer counter (3), software-owned; software copies
// the 3 CQEs to slots 1-3 of the new ring and steps over the RESIZE CQE;
// the next CQEs land at counter 4 on in the new ring, across its wrap.
// MODIFY_CQ's moderation (op_mod 0) and an unknown CQ are refused.
func TestCQResize(t *testing.T) {
	a, b := rcPair(t)
	a.drv.InitCQ(a.cq)
	send := func() uint16 {
		t.Helper()
		b.drv.PostRecv(b.wq, b.seg(0, 64))
		idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
			Data: []uverbs.DataSeg{a.seg(0, 10)}})
		b.poll(t)
		return idx
	}
	var idx [3]uint16
	for i := range idx {
		idx[i] = send()
	}
	geo := uverbs.CQ{LogSize: a.cq.LogSize, CQESize: uverbs.CQESize64}
	for i := 0; ; i++ {
		a.d.Sync()
		a.d.core.Lock()
		done := geo.SoftwareOwns(cqeAt(a.drv, a.cq, 2)[uverbs.OpOwnOffset], 2)
		a.d.core.Unlock()
		if done {
			break
		}
		if i == 2000 {
			t.Fatal("3 REQ CQEs not written")
		}
		time.Sleep(time.Millisecond)
	}

	var ce *mlx5test.CmdError
	if _, err := a.drv.Exec(modifyCQIn(a.cq.CQN, 1, a.drv.Alloc(4096, 4096)), ifc.Linux612CmdSize); !errors.As(err, &ce) || ce.Status != ifc.StatBadSizeOutsCQEs {
		t.Fatalf("shrink below the CQEs not consumed: %v, want BAD_SIZE_OUTS_CQES", err)
	}
	if op := cqeAt(a.drv, a.cq, 3)[uverbs.OpOwnOffset]; op != uverbs.OpOwnInit {
		t.Fatalf("a refused resize wrote op_own %#x at the producer", op)
	}
	in := modifyCQIn(a.cq.CQN, 1, a.drv.Alloc(4096, 4096))
	ifc.MboxInOpMod.Set(in, 0)
	if _, err := a.drv.Exec(in, ifc.Linux612CmdSize); !errors.As(err, &ce) || ce.Status != ifc.StatBadParamErr {
		t.Fatalf("MODIFY_CQ moderation: %v, want BAD_PARAM", err)
	}
	if _, err := a.drv.Exec(modifyCQIn(0xffffff, 3, a.drv.Alloc(4096, 4096)), ifc.Linux612CmdSize); !errors.As(err, &ce) || ce.Status != ifc.StatBadResErr {
		t.Fatalf("MODIFY_CQ of no CQ: %v, want BAD_RESOURCE", err)
	}

	page := a.drv.Alloc(4096, 4096)
	nc := &mlx5test.CQ{CQN: a.cq.CQN, LogSize: 3, Buf: mlx5test.Buf{Pages: []uint64{page}, DBR: a.cq.DBR}}
	a.drv.InitCQ(nc)
	if _, err := a.drv.Exec(modifyCQIn(a.cq.CQN, 3, page), ifc.Linux612CmdSize); err != nil {
		t.Fatalf("resize to 8 entries: %v", err)
	}
	r := cqeAt(a.drv, a.cq, 3)
	if op := r[uverbs.OpOwnOffset]; op>>4 != uverbs.CQEResizeCQ || !geo.SoftwareOwns(op, 3) {
		t.Fatalf("old ring at the producer: op_own %#x, want a software-owned RESIZE CQE", op)
	}
	ngeo := uverbs.CQ{LogSize: 3, CQESize: uverbs.CQESize64}
	for i := uint32(0); i < 3; i++ { // copy_resize_cqes
		d := cqeAt(a.drv, nc, i+1)
		copy(d, cqeAt(a.drv, a.cq, i))
		d[uverbs.OpOwnOffset] = d[uverbs.OpOwnOffset]&^uverbs.CQEOwnerMask | ngeo.Owner(i+1)
	}
	a.cq, a.ci = nc, 1
	for i := range idx {
		checkReq(t, a.poll(t), a.wq.Q.QPN, idx[i], uverbs.OpcodeSend, 0)
	}
	for range 10 { // counters 4 to 13: the new ring wraps
		i := send()
		checkReq(t, a.poll(t), a.wq.Q.QPN, i, uverbs.OpcodeSend, 0)
	}
	a.noCQE(t)
}
