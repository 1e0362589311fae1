package mlx5

import (
	"bytes"
	"testing"

	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// TestXRCRemoteAccessInSRQPD: an XRC target QP lives in the kernel's PD
// (mlx5_ib's devr->p0) while the memory its requests reach is in the XRC
// SRQ's PD: an RDMA WRITE, a FETCH_ADD and a COMPARE_SWAP through the XRC
// SRQ succeed on an R_Key of the SRQ's PD (pyverbs test_xrc_atomic_*
// failed with a remote access error when the target checked its own PD);
// an R_Key of another PD still fails with a remote access error.
func TestXRCRemoteAccessInSRQPD(t *testing.T) {
	x := newXRC(t)
	if x.tgt.pd == x.tgt.ib.P0 {
		t.Fatal("the target QP and its XRC SRQ share a PD: the test proves nothing")
	}
	ini, tgt := x.ini, x.tgt
	for i := range 256 {
		ini.mem(0, 256)[i] = byte(i) ^ 0x5a
	}
	idx := ini.drv.PostSend(ini.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
		Segs: uverbs.HasXRC | uverbs.HasRAddr, XRCSRQN: x.srq.N, RAddr: uverbs.RAddrSeg{RAddr: tgt.data + 4096, RKey: tgt.key},
		Data: []uverbs.DataSeg{ini.seg(0, 256)}})
	checkReq(t, ini.poll(t), ini.wq.Q.QPN, idx, uverbs.OpcodeRDMAWrite, 0)
	if !bytes.Equal(tgt.mem(4096, 256), ini.mem(0, 256)) {
		t.Fatal("XRC RDMA WRITE data differ")
	}
	atomic := func(op uint8, seg uverbs.AtomicSeg) {
		t.Helper()
		idx := ini.drv.PostSend(ini.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: op, FMCESE: signaled},
			Segs: uverbs.HasXRC | uverbs.HasRAddr | uverbs.HasAtomic, XRCSRQN: x.srq.N,
			RAddr: uverbs.RAddrSeg{RAddr: tgt.data + 40960, RKey: tgt.key}, Atomic: seg, Data: []uverbs.DataSeg{ini.seg(40960, 8)}})
		checkReq(t, ini.poll(t), ini.wq.Q.QPN, idx, op, 8)
	}
	atomic(uverbs.OpcodeAtomicFA, uverbs.AtomicSeg{SwapAdd: 7})
	if v := tgt.mem(40960, 8); le.Uint64(v) != 7 && be.Uint64(v) != 7 {
		t.Fatalf("after XRC FETCH_ADD: % x", v)
	}
	atomic(uverbs.OpcodeAtomicCS, uverbs.AtomicSeg{Compare: 7, SwapAdd: 11})
	if v := tgt.mem(40960, 8); le.Uint64(v) != 11 && be.Uint64(v) != 11 {
		t.Fatalf("after XRC COMPARE_SWAP: % x", v)
	}
	x.tgt.noCQE(t)
	x.srqEnd.noCQE(t)

	// An mkey of the target's own PD (not the SRQ's): remote access error.
	other := addRCEnd(t, tgt.d, tgt.drv, tgt.ib)
	ini.drv.PostSend(ini.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
		Segs: uverbs.HasXRC | uverbs.HasRAddr, XRCSRQN: x.srq.N, RAddr: uverbs.RAddrSeg{RAddr: other.data, RKey: other.key},
		Data: []uverbs.DataSeg{ini.seg(0, 64)}})
	c := ini.poll(t)
	if op := c[uverbs.OpOwnOffset] >> 4; op != uverbs.CQEReqErr {
		t.Fatalf("WRITE to another PD's mkey: CQE opcode %#x, want a requester error", op)
	}
	if e := uverbs.DecodeErrCQE(c); e.Syndrome != uverbs.SyndromeRemoteAccessErr {
		t.Fatalf("WRITE to another PD's mkey: syndrome %#x, want remote access error", e.Syndrome)
	}
}
