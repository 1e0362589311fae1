package mlx5

import (
	"errors"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// armRMP is mlx5_ib's arm_rmp_cmd: MODIFY_RMP RDY to RDY with lwm.
func armRMP(drv *mlx5test.Driver, rmpn, lwm uint32) error {
	in := make([]byte, ifc.Linux612ModifyRMPInSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpModifyRMP))
	ifc.ModifyRMPInRMPState.Set(in, ifc.RMPStateRDY)
	ifc.ObjIn.Set(in, rmpn)
	ifc.ModifyRMPInBitmaskLWM.Set(in, 1)
	rmpc := ifc.ModifyRMPInCtx.Bytes(in)
	ifc.RMPCState.Set(rmpc, ifc.RMPStateRDY)
	ifc.RMPWQ(ifc.WQLWM).Set(rmpc, lwm)
	_, err := drv.Exec(in, ifc.Linux612CmdSize)
	return err
}

// queryRMP is query_rmp_cmd: the rmpc's state and wq.lwm, log_wq_sz.
func queryRMPOf(t *testing.T, drv *mlx5test.Driver, rmpn uint32) (state, lwm, logSize uint32) {
	t.Helper()
	in := make([]byte, ifc.Linux612CmdSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpQueryRMP))
	ifc.ObjIn.Set(in, rmpn)
	out, err := drv.Exec(in, ifc.Linux612QueryRMPOutSize)
	if err != nil {
		t.Fatalf("QUERY_RMP: %v", err)
	}
	rmpc := ifc.QueryRMPOutCtx.Bytes(out)
	return ifc.RMPCState.Get(rmpc), ifc.RMPWQ(ifc.WQLWM).Get(rmpc), ifc.RMPWQ(ifc.WQLogSz).Get(rmpc)
}

// srqLimitEvents drains the async EQ and returns the SRQs its
// SRQ_RQ_LIMIT events named.
func srqLimitEvents(e *rcEnd) []uint32 {
	e.d.Sync()
	e.d.core.Lock()
	defer e.d.core.Unlock()
	var n []uint32
	for b := e.drv.NextEQE(e.drv.AsyncEQ); b != nil; b = e.drv.NextEQE(e.drv.AsyncEQ) {
		if b[ifc.EQEType] == ifc.EventSRQRQLimit && b[eqeQPType] == eqeTypeSRQ {
			n = append(n, be32(b[eqeQPNumber:])&0xffffff)
		}
	}
	return n
}

// TestSRQLimit: pyverbs test_modify_srq_limit through the fake driver.
// MODIFY_RMP arms an RMP of 4 WQEs, all posted, at 3; QUERY_RMP reads
// the limit back with the RMP RDY. The first receive leaves 3 posted: no
// event; the second leaves 2: one SRQ_RQ_LIMIT naming the RMP on the
// async EQ, and the limit reads 0 (disarmed): the third raises nothing.
// A limit above the RMP's WQEs, a state change and an unknown RMP are
// refused.
func TestSRQLimit(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b0 := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	s, ring := newRMP(t, b0) // 4 WQEs of 64 bytes
	b := addEndWith(t, b0.d, b0.drv, b0.ib, func(q *mlx5test.QPArgs) { q.RQType, q.SRQ = ifc.RQTypeSRQ, s.N })
	a.connect(t, b0.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	for i := range 4 {
		b.drv.PostSRQRecv(ring, b0.seg(uint64(i*1024), 1024))
	}
	var ce *mlx5test.CmdError
	if err := armRMP(b.drv, s.N, 5); !errors.As(err, &ce) || ce.Status != ifc.StatBadParamErr {
		t.Fatalf("limit 5 of 4 WQEs: %v, want BAD_PARAM", err)
	}
	if err := armRMP(b.drv, 0xfffff, 1); !errors.As(err, &ce) || ce.Status != ifc.StatBadResErr {
		t.Fatalf("MODIFY_RMP of no RMP: %v, want BAD_RESOURCE", err)
	}
	if err := armRMP(b.drv, s.N, 3); err != nil {
		t.Fatalf("MODIFY_RMP lwm 3: %v", err)
	}
	if st, lwm, sz := queryRMPOf(t, b.drv, s.N); st != ifc.RMPStateRDY || lwm != 3 || sz != 2 {
		t.Fatalf("QUERY_RMP: state %d lwm %d log_wq_sz %d, want RDY, 3, 2", st, lwm, sz)
	}
	send := func() {
		t.Helper()
		a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
			Data: []uverbs.DataSeg{a.seg(0, 32)}})
		a.poll(t)
		b.poll(t)
	}
	send()
	if ev := srqLimitEvents(b); len(ev) != 0 {
		t.Fatalf("3 WQEs left of limit 3: events %v", ev)
	}
	send()
	var ev []uint32
	for range 1000 {
		if ev = srqLimitEvents(b); len(ev) != 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if len(ev) != 1 || ev[0] != s.N {
		t.Fatalf("2 WQEs left of limit 3: SRQ_RQ_LIMIT events %v, want one for %#x", ev, s.N)
	}
	if _, lwm, _ := queryRMPOf(t, b.drv, s.N); lwm != 0 {
		t.Fatalf("after the event the limit reads %d, want 0 (disarmed)", lwm)
	}
	send()
	if ev := srqLimitEvents(b); len(ev) != 0 {
		t.Fatalf("disarmed: events %v", ev)
	}
}
