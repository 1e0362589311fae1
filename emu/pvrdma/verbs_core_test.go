package pvrdma_test

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestCore runs the core-behaviour tests every device model passes
// (package verbstest) against the PVRDMA model, through its fake driver.
func TestCore(t *testing.T) {
	checkGoroutines(t)
	verbstest.RunCore(t, func(t *testing.T, sw *fabric.Switch, k int, opts verbstest.HostOpts) verbstest.Host {
		h := &verbsHost{t: t, dirs: map[uint64]verbsBuf{}, mrs: map[uint32]uint32{}}
		if opts.OneRegion {
			h.host = newHostCaps(t, sw, k, smallMRTable()) // MR handle 1: the driver's DMA region
		} else {
			h.host = newHost(t, sw, k)
		}
		return h
	})
}

// verbsHost is the PVRDMA fake driver as a verbstest.Host.
type verbsHost struct {
	*host
	t    *testing.T
	dirs map[uint64]verbsBuf // Alloc's buffers, by address
	mrs  map[uint32]uint32   // MR handles by lkey
}

type verbsBuf struct {
	pages []uint64
	dir   uint64
}

type verbsQP struct{ q *emutest.QP }

func (h *verbsHost) Alloc(n int) uint64 {
	pages, dir := h.Buffer((n + 4095) / 4096)
	h.dirs[pages[0]] = verbsBuf{pages, dir}
	return pages[0]
}

func (h *verbsHost) Mem(addr uint64, n int) []byte { return h.RAM.Mem[addr : addr+uint64(n)] }

// pvrdmaAccess maps mr's access bits to pvrdma_access_flags.
func pvrdmaAccess(access uint32) uint32 {
	var a uint32
	for _, m := range []struct{ mr, pvrdma uint32 }{
		{mr.LocalWrite, abi.AccessLocalWrite}, {mr.RemoteWrite, abi.AccessRemoteWrite},
		{mr.RemoteRead, abi.AccessRemoteRead}, {mr.RemoteAtomic, abi.AccessRemoteAtomic},
	} {
		if access&m.mr != 0 {
			a |= m.pvrdma
		}
	}
	return a
}

func (h *verbsHost) regMR(pd uint32, addr uint64, n int, access uint32) abi.CmdCreateMRResp {
	h.t.Helper()
	b, ok := h.dirs[addr]
	if !ok {
		h.t.Fatalf("RegMR of %#x: not a buffer from Alloc", addr)
	}
	rsp, err := h.CreateMR(abi.CmdCreateMR{Start: addr, Length: uint64(n), PdirDMA: b.dir,
		PDHandle: pd, AccessFlags: pvrdmaAccess(access), NChunks: uint32(len(b.pages))})
	if err != nil {
		h.t.Fatal(err)
	}
	h.mrs[rsp.LKey] = rsp.MRHandle
	return rsp
}

func (h *verbsHost) RegMR(addr uint64, n int, access uint32) (lkey, rkey uint32) {
	rsp := h.regMR(h.pd, addr, n, access)
	return rsp.LKey, rsp.RKey
}

func (h *verbsHost) RegMRForeignPD(addr uint64, n int, access uint32) uint32 {
	pd, err := h.CreatePD(0)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.regMR(pd, addr, n, access).LKey
}

func (h *verbsHost) DeregMR(lkey uint32) {
	handle, ok := h.mrs[lkey]
	if !ok {
		h.t.Fatalf("DeregMR of lkey %#x: no such region", lkey)
	}
	delete(h.mrs, lkey)
	h.destroyMR(h.t, handle)
}

func (h *verbsHost) CreateRCQP(depth uint32) verbstest.QP {
	return verbsQP{h.qp(h.t, abi.QPTypeRC, depth)}
}

func (h *verbsHost) Connect(q verbstest.QP, peer verbstest.Host, pq verbstest.QP, o verbstest.RCOpts) {
	opts := rcOpts{rnrRetry: o.RNRRetry, retryCnt: o.RetryCnt, timeout: o.Timeout, minRNR: 1, access: allAccess}
	connect(h.t, h.host, q.(verbsQP).q, peer.(*verbsHost).host, pq.(verbsQP).q, opts)
}

func (h *verbsHost) Sync() { h.dev.Sync() }

// The PVRDMA completion values (pvrdma_wc_status and pvrdma_wc_opcode)
// back in the core's terms.
var (
	wcStatuses = map[uint32]transport.Status{
		uverbs.WCSuccess: transport.StatusSuccess, uverbs.WCLocLenErr: transport.StatusLocLenErr,
		uverbs.WCLocQPOpErr: transport.StatusLocQPOpErr, uverbs.WCLocProtErr: transport.StatusLocProtErr,
		uverbs.WCWRFlushErr: transport.StatusWRFlushErr, uverbs.WCBadRespErr: transport.StatusBadRespErr,
		uverbs.WCRemInvReqErr: transport.StatusRemInvReq, uverbs.WCRemAccessErr: transport.StatusRemAccess,
		uverbs.WCRemOpErr: transport.StatusRemOpErr, uverbs.WCRetryExcErr: transport.StatusRetryExc,
		uverbs.WCRNRRetryExc: transport.StatusRNRRetryExc,
	}
	wcOpcodes = map[uint32]transport.WCOpcode{
		uverbs.WCSend: transport.WCSend, uverbs.WCRDMAWrite: transport.WCWrite, uverbs.WCRDMARead: transport.WCRead,
		uverbs.WCCompSwap: transport.WCCompSwap, uverbs.WCFetchAdd: transport.WCFetchAdd,
		uverbs.WCLocalInv: transport.WCLocalInv, uverbs.WCFastRegMR: transport.WCFastReg,
		uverbs.WCRecv: transport.WCRecv, uverbs.WCRecvRDMAImm: transport.WCRecvWriteImm,
	}
	sendOpcodes = map[transport.Opcode]uint32{
		transport.OpSend: uverbs.OpSend, transport.OpSendImm: uverbs.OpSendImm, transport.OpSendInv: uverbs.OpSendInv,
		transport.OpWrite: uverbs.OpRDMAWrite, transport.OpWriteImm: uverbs.OpRDMAWriteImm, transport.OpRead: uverbs.OpRDMARead,
		transport.OpCompSwap: uverbs.OpAtomicCmpSwp, transport.OpFetchAdd: uverbs.OpAtomicFetchAdd,
		transport.OpLocalInv: uverbs.OpLocalInv, transport.OpFastReg: uverbs.OpFastRegMR,
	}
)

func (h *verbsHost) Poll() (verbstest.WC, bool) {
	e, ok := h.cq.Poll()
	if !ok {
		return verbstest.WC{}, false
	}
	st, known := wcStatuses[e.Status]
	if !known {
		h.t.Fatalf("CQE status %d is no status the device should write", e.Status)
	}
	return verbstest.WC{ID: e.WRID, Status: st, Opcode: wcOpcodes[e.Opcode], ByteLen: e.ByteLen,
		Recv: e.Opcode&uverbs.WCRecv != 0}, true
}

func (q verbsQP) QPN() uint32 { return q.q.QPN }

func sges(in []mr.SGE) []uverbs.SGE {
	out := make([]uverbs.SGE, len(in))
	for i, s := range in {
		out[i] = uverbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
	}
	return out
}

func (q verbsQP) PostSend(wr verbstest.SendWR) {
	w := send(sendOpcodes[wr.Opcode], wr.ID, 0, sges(wr.SGEs)...)
	switch wr.Opcode {
	case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
		w.SetRDMA(wr.RemoteAddr, wr.RKey)
	case transport.OpCompSwap, transport.OpFetchAdd:
		w.SetAtomic(wr.RemoteAddr, wr.CompareAdd, wr.Swap, wr.RKey)
	}
	if wr.Opcode == transport.OpSendImm || wr.Opcode == transport.OpWriteImm {
		w.Ex = [4]byte{byte(wr.Imm >> 24), byte(wr.Imm >> 16), byte(wr.Imm >> 8), byte(wr.Imm)}
	}
	q.q.PostSend(w)
}

func (q verbsQP) PostRecv(wr verbstest.RecvWR) {
	q.q.PostRecv(uverbs.RecvWQE{WRID: wr.ID, SGE: sges(wr.SGEs)})
}
