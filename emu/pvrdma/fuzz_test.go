package pvrdma_test

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math/bits"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// fuzzDevice is a probed device with the MAD layer's GSI QP and one user
// context in place, as a guest has them when user space starts.
type fuzzDevice struct {
	drv  *emutest.Driver
	dev  *pvrdma.Device
	caps abi.DeviceCaps
	// Kernel objects of the MAD layer and the user context.
	pd, mr, cq, qp, ctx uint32
}

func newFuzzDevice(t *testing.T) *fuzzDevice {
	drv := emutest.New(2 << 20)
	dev := pvrdma.New(pvrdma.Config{Mem: drv.RAM, MSIX: drv.IRQ.Raise, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	pd, lkey, cq, qp, err := drv.KernelGSI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.CreateUC(1)
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzDevice{drv: drv, dev: dev, caps: drv.Caps(), pd: pd, mr: lkey >> 8, cq: cq.Handle, qp: qp.Handle, ctx: ctx}
}

// FuzzCommands feeds sequences of raw 184-byte command requests (opcode
// forced into the valid range most of the time) to a probed device, with a
// GSI QP and a user context in place, then rings doorbells named by the
// input. The device must never panic and must still answer QUERY_PORT.
func FuzzCommands(f *testing.F) {
	seed := func(reqs ...abi.Request) []byte {
		var out []byte
		for _, req := range reqs {
			var slot [abi.CmdReqSize]byte
			req.Encode(slot[:])
			hdr := abi.CmdHdr{Cmd: req.Opcode()}
			hdr.Encode(slot[:])
			out = append(out, slot[:]...)
		}
		return out
	}
	f.Add(seed(&abi.CmdQueryPort{PortNum: 1}))
	f.Add(seed(&abi.CmdCreatePD{CtxHandle: 1}))
	f.Add(seed(&abi.CmdCreateCQ{PdirDMA: 0x5000, CQE: 16, NChunks: 2}))
	f.Add(seed(&abi.CmdModifyQP{QPHandle: 1, AttrMask: abi.AttrState, Attrs: abi.QPAttr{State: abi.QPStateErr}},
		&abi.CmdDestroyQP{QPHandle: 1}))
	f.Add(seed(&abi.CmdCreateQP{PdirDMA: 0x5000, PDHandle: 1, SendCQHandle: 1, RecvCQHandle: 1,
		MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, TotalChunks: 3, SendChunks: 1, QPType: abi.QPTypeRC}))
	f.Add(seed(&abi.CmdCreateMR{Start: 0x1000, Length: 0x1000, PdirDMA: 0x5000, PDHandle: 1, AccessFlags: 1, NChunks: 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		fd := newFuzzDevice(t)
		drv := fd.drv
		for len(in) > 0 {
			n := min(len(in), abi.CmdReqSize)
			var slot [abi.CmdReqSize]byte
			copy(slot[:], in[:n])
			in = in[n:]
			var hdr abi.CmdHdr
			hdr.Decode(slot[:])
			if hdr.Cmd < 1<<31 {
				hdr.Cmd %= abi.NumOpcodes
			}
			hdr.Encode(slot[:])
			drv.CmdRaw(slot[:])
			// A doorbell named by the same bytes.
			drv.Doorbell(uint32(slot[0])%4, uint64(slot[1]%3)*4, binary.LittleEndian.Uint32(slot[2:]))
		}
		fd.dev.Sync()
		if _, err := drv.QueryPort(1); err != nil {
			t.Fatalf("device stopped serving: %v", err)
		}
	})
}

// typedFields are the fuzzer's values for the named fields of a typed
// request: handle fields take Handle (0: the handle the run created last
// of that kind) or Handle2 (contexts), counts Count and Count2, addresses
// and PSNs Addr, lengths and page counts Length, masks and flags Mask, byte
// fields (QP type, port, timers) Small.
type typedFields struct {
	Handle, Handle2 uint32
	Count, Count2   uint32
	Addr, Length    uint64
	Mask            uint32
	Small           uint8
}

// objKind is a kind of device object the typed fuzzer tracks.
type objKind int

const (
	kindUC objKind = iota
	kindPD
	kindMR
	kindCQ
	kindQP
	kindSRQ
	numKinds
)

// liveObjects is the fuzzer's model of the device's object tables: handle
// to owning context, per kind.
type liveObjects struct {
	objs [numKinds]map[uint32]uint32
	last [numKinds]uint32
}

func (l *liveObjects) add(k objKind, h, ctx uint32) { l.objs[k][h] = ctx; l.last[k] = h }

// pick is the handle a field gets: the fuzzer's value, or for 0 the last
// handle of that kind.
func (l *liveObjects) pick(k objKind, v uint32) uint32 {
	if v == 0 {
		return l.last[k]
	}
	return v
}

// FuzzTypedCommands issues sequences of typed requests whose named fields
// are the fuzzer's values: ops picks each command, typedFields fills its
// fields. Beyond "no panic", it checks every response against the request
// and a model of the object tables: the ack is the opcode's, the response
// key is echoed, ERR equals the response's err byte, a create never hands
// out a live handle nor exceeds the caps, a destroy succeeds only on a live
// handle, and the device still answers QUERY_PORT at the end.
func FuzzTypedCommands(f *testing.F) {
	// A kernel PD, CQ and RC QP (3 pages: 1 send), RESET->INIT on port 1, destroyed.
	f.Add([]byte{byte(abi.OpCreatePD), byte(abi.OpCreateCQ), byte(abi.OpCreateQP), byte(abi.OpModifyQP), byte(abi.OpDestroyQP)},
		uint32(0), uint32(0), uint32(1), uint32(1), uint64(0), uint64(3|1<<16), uint32(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags), uint8(1<<4|abi.QPTypeRC))
	f.Add([]byte{byte(abi.OpCreateMR), byte(abi.OpDestroyMR), byte(abi.OpDestroyPD)},
		uint32(1), uint32(0), uint32(1), uint32(1), uint64(0x1000), uint64(0x1000), uint32(abi.AccessLocalWrite), uint8(0))
	// A user PD and SRQ in context 1, its limit armed and queried, then the context destroyed with its objects.
	f.Add([]byte{byte(abi.OpCreatePD), byte(abi.OpCreateSRQ), byte(abi.OpModifySRQ), byte(abi.OpQuerySRQ), byte(abi.OpDestroyUC)},
		uint32(0), uint32(1), uint32(8), uint32(1), uint64(0), uint64(0), uint32(abi.SRQAttrLimit), uint8(0))
	f.Add([]byte{byte(abi.OpCreateBind), byte(abi.OpDestroyBind), byte(abi.OpQueryPKey), byte(abi.OpCreateUC)},
		uint32(3), uint32(0), uint32(2), uint32(1), uint64(0), uint64(0), uint32(0), uint8(abi.GIDTypeFlagRoCEv2))
	f.Fuzz(func(t *testing.T, ops []byte, handle, handle2, count, count2 uint32, addr, length uint64, mask uint32, small uint8) {
		fd := newFuzzDevice(t)
		v := typedFields{Handle: handle, Handle2: handle2, Count: count, Count2: count2, Addr: addr, Length: length, Mask: mask, Small: small}
		var live liveObjects
		for k := range live.objs {
			live.objs[k] = map[uint32]uint32{}
		}
		live.add(kindPD, fd.pd, 0)
		live.add(kindMR, fd.mr, 0)
		live.add(kindCQ, fd.cq, 0)
		live.add(kindQP, fd.qp, 0)
		live.add(kindUC, fd.ctx, fd.ctx)
		// Pages for the queues and regions the commands describe.
		pages, dir := fd.drv.Buffer(8)
		if v.Addr == 0 {
			v.Addr = pages[0]
		}
		for i, b := range ops {
			if i == 16 {
				break
			}
			fd.typedCommand(t, &live, abi.Opcode(b)%abi.NumOpcodes, &v, dir, uint64(i+1))
		}
		fd.dev.Sync()
		if _, err := fd.drv.QueryPort(1); err != nil {
			t.Fatalf("device stopped serving: %v", err)
		}
	})
}

// typedCommand builds the request for op from the fuzzer's field values,
// issues it with response key key and checks the response.
func (fd *fuzzDevice) typedCommand(t *testing.T, live *liveObjects, op abi.Opcode, v *typedFields, dir, key uint64) {
	caps := &fd.caps
	var req abi.Request
	var rsp abi.Response
	switch op {
	case abi.OpQueryPort:
		req, rsp = &abi.CmdQueryPort{PortNum: v.Small}, &abi.CmdQueryPortResp{}
	case abi.OpQueryPKey:
		req, rsp = &abi.CmdQueryPKey{PortNum: v.Small, Index: uint8(v.Count)}, &abi.CmdQueryPKeyResp{}
	case abi.OpCreatePD:
		req, rsp = &abi.CmdCreatePD{CtxHandle: v.Handle2}, &abi.CmdCreatePDResp{}
	case abi.OpDestroyPD:
		req = &abi.CmdDestroyPD{PDHandle: live.pick(kindPD, v.Handle)}
	case abi.OpCreateMR:
		req, rsp = &abi.CmdCreateMR{Start: v.Addr, Length: v.Length, PdirDMA: dir, PDHandle: live.pick(kindPD, v.Handle),
			AccessFlags: v.Mask, Flags: uint32(v.Small), NChunks: v.Count}, &abi.CmdCreateMRResp{}
	case abi.OpDestroyMR:
		req = &abi.CmdDestroyMR{MRHandle: live.pick(kindMR, v.Handle)}
	case abi.OpCreateCQ:
		req, rsp = &abi.CmdCreateCQ{PdirDMA: dir, CtxHandle: v.Handle2, CQE: v.Count, NChunks: v.Count2 + 1}, &abi.CmdCreateCQResp{}
	case abi.OpResizeCQ:
		req, rsp = &abi.CmdResizeCQ{CQHandle: live.pick(kindCQ, v.Handle), CQE: v.Count}, &abi.CmdResizeCQResp{}
	case abi.OpDestroyCQ:
		req = &abi.CmdDestroyCQ{CQHandle: live.pick(kindCQ, v.Handle)}
	case abi.OpCreateQP:
		req, rsp = &abi.CmdCreateQP{PdirDMA: dir, PDHandle: live.pick(kindPD, v.Handle),
			SendCQHandle: live.pick(kindCQ, v.Handle2), RecvCQHandle: live.pick(kindCQ, v.Handle2),
			SRQHandle: live.last[kindSRQ], MaxSendWR: v.Count, MaxRecvWR: v.Count, MaxSendSGE: v.Count2, MaxRecvSGE: v.Count2,
			AccessFlags: v.Mask, TotalChunks: uint16(v.Length), SendChunks: uint16(v.Length >> 16),
			SQSigAll: v.Small >> 7, QPType: v.Small & 7, IsSRQ: (v.Small >> 3) & 1}, &abi.CmdCreateQPResp{}
	case abi.OpModifyQP:
		a := abi.QPAttr{State: v.Count % 8, CurState: v.Count2 % 8, PathMTU: v.Count2, QKey: v.Handle2,
			RQPSN: uint32(v.Addr), SQPSN: uint32(v.Addr >> 32), DestQPN: v.Handle2, AccessFlags: uint32(v.Addr >> 56),
			PortNum: v.Small >> 4, Timeout: v.Small, RetryCnt: v.Small & 15, RNRRetry: v.Small & 15, MinRNRTimer: v.Small,
			MaxRdAtomic: v.Small, MaxDestRdAtomic: v.Small, EnSQDAsyncNotify: v.Small & 1}
		a.AH.SGIDIndex, a.AH.AHFlags, a.AH.PortNum = v.Small&15, abi.AHFlagGRH, 1
		req = &abi.CmdModifyQP{QPHandle: live.pick(kindQP, v.Handle), AttrMask: v.Mask, Attrs: a}
	case abi.OpQueryQP:
		req, rsp = &abi.CmdQueryQP{QPHandle: live.pick(kindQP, v.Handle), AttrMask: v.Mask}, &abi.CmdQueryQPResp{}
	case abi.OpDestroyQP:
		req, rsp = &abi.CmdDestroyQP{QPHandle: live.pick(kindQP, v.Handle)}, &abi.CmdDestroyQPResp{}
	case abi.OpCreateUC:
		req, rsp = &abi.CmdCreateUC{PFN64: fd.drv.BAR2>>12 + uint64(v.Count)%uint64(2*caps.MaxUAR)}, &abi.CmdCreateUCResp{}
	case abi.OpDestroyUC:
		req = &abi.CmdDestroyUC{CtxHandle: live.pick(kindUC, v.Handle)}
	case abi.OpCreateBind:
		gid := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: byte(v.Count)}
		req = &abi.CmdCreateBind{MTU: v.Count2, VLAN: v.Handle2, Index: v.Handle, NewGID: gid, GIDType: v.Small}
	case abi.OpDestroyBind:
		req = &abi.CmdDestroyBind{Index: v.Handle}
	case abi.OpCreateSRQ:
		req, rsp = &abi.CmdCreateSRQ{PdirDMA: dir, PDHandle: live.pick(kindPD, v.Handle), NChunks: v.Count2 + 1,
			Attrs: abi.SRQAttr{MaxWR: v.Count, MaxSGE: v.Count2, SRQLimit: uint32(v.Length)}, SRQType: v.Small}, &abi.CmdCreateSRQResp{}
	case abi.OpModifySRQ:
		req = &abi.CmdModifySRQ{SRQHandle: live.pick(kindSRQ, v.Handle), AttrMask: v.Mask,
			Attrs: abi.SRQAttr{MaxWR: v.Count, SRQLimit: v.Count2}}
	case abi.OpQuerySRQ:
		req, rsp = &abi.CmdQuerySRQ{SRQHandle: live.pick(kindSRQ, v.Handle)}, &abi.CmdQuerySRQResp{}
	case abi.OpDestroySRQ:
		req = &abi.CmdDestroySRQ{SRQHandle: live.pick(kindSRQ, v.Handle)}
	default:
		t.Fatalf("opcode %v has no builder", op)
	}
	if req.Opcode() != op {
		t.Fatalf("builder for %v made a %v request", op, req.Opcode())
	}

	var slot [abi.CmdReqSize]byte
	req.Encode(slot[:])
	hdr := abi.CmdHdr{Response: key, Cmd: op}
	hdr.Encode(slot[:])
	errReg, out := fd.drv.CmdRaw(slot[:])
	var rspHdr abi.CmdRespHdr
	rspHdr.Decode(out[:])
	if rspHdr.Ack != op.Ack() || rspHdr.Response != key {
		t.Fatalf("%v: ack %#x key %#x, want %#x %#x", op, rspHdr.Ack, rspHdr.Response, op.Ack(), key)
	}
	if uint32(rspHdr.Err) != errReg {
		t.Fatalf("%v: ERR %d but response err %d", op, errReg, rspHdr.Err)
	}
	if errReg != 0 {
		return
	}
	if rsp != nil {
		rsp.Decode(out[:])
	}

	// Successful commands: check the response and update the model.
	created := func(k objKind, h, ctx, limit uint32) {
		t.Helper()
		if _, dup := live.objs[k][h]; dup {
			t.Fatalf("%v handed out live handle %d", op, h)
		}
		if h == 0 || h >= limit {
			t.Fatalf("%v handle %d outside 1..%d", op, h, limit-1)
		}
		live.add(k, h, ctx)
		if n := uint32(len(live.objs[k])); n > limit {
			t.Fatalf("%v: %d objects, caps allow %d", op, n, limit)
		}
	}
	destroyed := func(k objKind, h uint32) {
		t.Helper()
		if _, ok := live.objs[k][h]; !ok {
			t.Fatalf("%v succeeded on handle %d, which is not live", op, h)
		}
		delete(live.objs[k], h)
	}
	ctxOfPD := func(pd uint32) uint32 { return live.objs[kindPD][pd] }
	switch req := req.(type) {
	case *abi.CmdQueryPort:
		if a := rsp.(*abi.CmdQueryPortResp).Attrs; a.GIDTblLen != caps.GIDTblLen || a.PKeyTblLen != caps.MaxPKeys {
			t.Fatalf("QUERY_PORT %+v disagrees with the caps", a)
		}
	case *abi.CmdCreatePD:
		created(kindPD, rsp.(*abi.CmdCreatePDResp).PDHandle, req.CtxHandle, caps.MaxPD+1)
	case *abi.CmdDestroyPD:
		destroyed(kindPD, req.PDHandle)
	case *abi.CmdCreateMR:
		r := rsp.(*abi.CmdCreateMRResp)
		created(kindMR, r.MRHandle, ctxOfPD(req.PDHandle), caps.MaxMR+1)
		if r.LKey>>8 != r.MRHandle {
			t.Fatalf("CREATE_MR: lkey %#x does not name MR %d", r.LKey, r.MRHandle)
		}
	case *abi.CmdDestroyMR:
		destroyed(kindMR, req.MRHandle)
	case *abi.CmdCreateCQ:
		r := rsp.(*abi.CmdCreateCQResp)
		created(kindCQ, r.CQHandle, req.CtxHandle, caps.MaxCQ)
		if r.CQE != req.CQE || r.CQE > caps.MaxCQE {
			t.Fatalf("CREATE_CQ of %d entries answered %d (max %d)", req.CQE, r.CQE, caps.MaxCQE)
		}
	case *abi.CmdDestroyCQ:
		destroyed(kindCQ, req.CQHandle)
	case *abi.CmdCreateQP:
		r := rsp.(*abi.CmdCreateQPResp)
		created(kindQP, r.QPHandle, ctxOfPD(req.PDHandle), min(caps.MaxQP, 1<<16))
		w := bits.Len32(min(caps.MaxQP, 1<<16) - 1) // the QPN's low bits are the handle
		if r.QPN&(1<<w-1) != r.QPHandle || r.QPN >= 0xFFFFFF || r.MaxSendWR > caps.MaxQPWR || r.MaxRecvWR > caps.MaxQPWR || r.MaxInlineData != 0 {
			t.Fatalf("CREATE_QP response %+v", r)
		}
	case *abi.CmdQueryQP:
		if a := rsp.(*abi.CmdQueryQPResp).Attrs; a.State >= abi.NumQPStates || a.State != a.CurState {
			t.Fatalf("QUERY_QP state %d cur %d", a.State, a.CurState)
		}
	case *abi.CmdDestroyQP:
		destroyed(kindQP, req.QPHandle)
	case *abi.CmdCreateUC:
		h := rsp.(*abi.CmdCreateUCResp).CtxHandle
		created(kindUC, h, h, caps.MaxUAR)
	case *abi.CmdDestroyUC:
		destroyed(kindUC, req.CtxHandle)
		// The context's objects go with it.
		for k := range live.objs {
			for h, ctx := range live.objs[k] {
				if ctx == req.CtxHandle {
					delete(live.objs[k], h)
				}
			}
		}
	case *abi.CmdCreateSRQ:
		created(kindSRQ, rsp.(*abi.CmdCreateSRQResp).SRQN, ctxOfPD(req.PDHandle), caps.MaxSRQ)
	case *abi.CmdQuerySRQ:
		if a := rsp.(*abi.CmdQuerySRQResp).Attrs; a.SRQLimit > a.MaxWR || a.MaxWR > caps.MaxSRQWR {
			t.Fatalf("QUERY_SRQ %+v", a)
		}
	case *abi.CmdDestroySRQ:
		destroyed(kindSRQ, req.SRQHandle)
	}
}
