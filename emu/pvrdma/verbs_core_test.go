package pvrdma_test

import (
	"encoding/binary"
	"log/slog"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestCore runs the core-behaviour tests every device model passes
// (package verbstest) against the PVRDMA model, through its fake driver.
func TestCore(t *testing.T) {
	checkGoroutines(t)
	verbstest.RunCore(t, newVerbsHost)
}

// newVerbsHost is the PVRDMA fake driver as verbstest's NewHost: an HCA on
// net's switch with IPv4 10.0.0.k (GID index 1), a kernel PD (with its DMA
// region unless opts.Watch) and a CQ.
func newVerbsHost(t *testing.T, net *verbstest.Net, k int, opts verbstest.HostOpts) verbstest.Host {
	t.Helper()
	sw := net.Switch
	ram := opts.RAM
	if ram == 0 {
		ram = 64 << 20
	}
	var watch *verbstest.WriteWatch
	h := newHostWith(t, sw, k, ram, func(cfg *pvrdma.Config, drv *emutest.Driver) {
		cfg.SequentialQPNs = opts.SequentialQPNs
		if opts.Regions != 0 {
			caps := pvrdma.DefaultCaps()
			caps.MaxMR = uint32(opts.Regions)
			if !opts.Watch {
				caps.MaxMR++ // the driver's DMA region
			}
			cfg.Caps = &caps
		}
		if opts.Watch {
			watch = verbstest.NewWriteWatch(drv.RAM)
			cfg.Mem = watch
			// The attack fuzzers' hosts: warnings only, as a fuzzer's
			// thousands of runs would drown in debug lines.
			cfg.Log = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}, !opts.Watch)
	if watch != nil {
		emutest.AllowDevice(watch, h.Driver)
		emutest.AllowCQ(watch, "cq", h.cq)
	}
	return &verbsHost{host: h, t: t, watch: watch, verbsState: &verbsState{
		dirs: map[uint64]verbsBuf{}, mrs: map[uint32]uint32{}, qpns: map[uint64]uint32{}}}
}

// verbsHost is the PVRDMA fake driver as a verbstest.Host.
type verbsHost struct {
	*host
	*verbsState // shared with the host's Fresh contexts
	t           *testing.T
	watch       *verbstest.WriteWatch
}

// verbsState is what the driver knows of the objects it made.
type verbsState struct {
	dirs   map[uint64]verbsBuf // Alloc's buffers, by address
	mrs    map[uint32]uint32   // MR handles by lkey
	qpns   map[uint64]uint32   // QPNs by QP handle (CQEs name handles)
	events [][2]uint32         // async events read from the ring
}

type verbsBuf struct {
	pages []uint64
	dir   uint64
}

type verbsQP struct {
	q *emutest.QP
	d *emutest.Driver // its host's (where a fast-register's page list goes)
}

func (h *verbsHost) Alloc(n int) uint64 {
	pages, dir := h.Buffer((n + 4095) / 4096)
	h.dirs[pages[0]] = verbsBuf{pages, dir}
	return pages[0]
}

func (h *verbsHost) Mem(addr uint64, n int) []byte { return h.RAM.Mem[addr : addr+uint64(n)] }
func (h *verbsHost) Addr() verbstest.Addr          { return verbstest.Addr{MAC: h.mac, IP: h.ip} }
func (h *verbsHost) PD() uint32                    { return h.pd }

func (h *verbsHost) NewPD() uint32 {
	pd, err := h.CreatePD(0)
	if err != nil {
		h.t.Fatal(err)
	}
	return pd
}

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

func (h *verbsHost) createMR(req abi.CmdCreateMR) (lkey, rkey uint32) {
	h.t.Helper()
	rsp, err := h.CreateMR(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mrs[rsp.LKey] = rsp.MRHandle
	return rsp.LKey, rsp.RKey
}

func (h *verbsHost) RegMRAt(pd uint32, va, addr uint64, n int, access uint32) (lkey, rkey uint32) {
	h.t.Helper()
	b, ok := h.dirs[addr]
	if !ok {
		h.t.Fatalf("RegMR of %#x: not a buffer from Alloc", addr)
	}
	if va == 0 {
		va = addr
	}
	return h.createMR(abi.CmdCreateMR{Start: va, Length: uint64(n), PdirDMA: b.dir,
		PDHandle: pd, AccessFlags: pvrdmaAccess(access), NChunks: uint32(len(b.pages))})
}

func (h *verbsHost) RegMR(addr uint64, n int, access uint32) (lkey, rkey uint32) {
	h.t.Helper()
	return h.RegMRAt(h.pd, 0, addr, n, access)
}

func (h *verbsHost) AllocFRMR(pages int) (lkey, rkey uint32) {
	h.t.Helper()
	return h.createMR(abi.CmdCreateMR{PDHandle: h.pd, Flags: abi.MRFlagFRMR, NChunks: uint32(pages)})
}

func (h *verbsHost) DeregMR(lkey uint32) error {
	handle, ok := h.mrs[lkey]
	if !ok {
		h.t.Fatalf("DeregMR of lkey %#x: no such region", lkey)
	}
	if err := h.MustCmd(&abi.CmdDestroyMR{MRHandle: handle}, nil); err != nil {
		return err
	}
	delete(h.mrs, lkey)
	return nil
}

func (h *verbsHost) CreateRCQP(depth uint32) verbstest.QP {
	q := h.qp(h.t, abi.QPTypeRC, depth)
	h.qpns[uint64(q.Handle)] = q.QPN
	if h.watch != nil {
		emutest.AllowQP(h.watch, "qp", q)
	}
	return verbsQP{q, h.Driver}
}

func (h *verbsHost) Connect(q verbstest.QP, peer verbstest.Host, pq verbstest.QP, o verbstest.RCOpts) {
	opts := rcOpts{rnrRetry: o.RNRRetry, retryCnt: o.RetryCnt, timeout: o.Timeout, minRNR: 1, access: allAccess}
	connect(h.t, h.host, q.(verbsQP).q, peer.(*verbsHost).host, pq.(verbsQP).q, opts)
}

func (h *verbsHost) QPState(q verbstest.QP) transport.State {
	attr, err := q.(verbsQP).q.Query()
	if err != nil {
		h.t.Fatalf("QUERY_QP: %v", err)
	}
	return pvrdma.TransportState(uint8(attr.State))
}

func (h *verbsHost) Raised(q verbstest.QP, ev hca.Event) bool {
	h.events = append(h.events, h.AsyncEvents()...)
	return hasEvent(h.events, pvrdma.EQEType(ev), q.(verbsQP).q.Handle)
}

func (h *verbsHost) Sync()                                            { h.dev.Sync() }
func (h *verbsHost) Idle() bool                                       { return h.dev.Idle() }
func (h *verbsHost) Stats() (hca.DeviceStats, map[uint32]hca.QPStats) { return h.dev.Stats() }
func (h *verbsHost) Hold(fn func())                                   { h.dev.WithLock(fn) }
func (h *verbsHost) HoldTaking(fn func())                             { h.dev.HoldTaking(fn) }
func (h *verbsHost) Helped() uint64                                   { return h.dev.HelpedBatches() }
func (h *verbsHost) Reset()                                           { h.dev.Reset() }
func (h *verbsHost) Watch() *verbstest.WriteWatch                     { return h.watch }

// Caps: RoCE on the Ethernet switch, with the direct path and fast
// registration.
func (h *verbsHost) Caps() verbstest.Caps {
	return verbstest.Caps{LinkLayer: verbstest.Ethernet, Direct: true, FastReg: true}
}

func (h *verbsHost) Alive() error {
	_, err := h.QueryPort(1)
	return err
}

func (h *verbsHost) Fresh() verbstest.Host {
	pd := h.NewPD()
	cq, err := h.CreateCQ(0, 64)
	if err != nil {
		h.t.Fatalf("fresh CQ: %v", err)
	}
	if h.watch != nil {
		emutest.AllowCQ(h.watch, "fresh cq", cq)
	}
	hc := *h.host
	hc.pd, hc.cq = pd, cq
	f := *h
	f.host = &hc
	return &f
}

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
		Recv: e.Opcode&uverbs.WCRecv != 0, QPN: h.qpns[e.QP],
		WithImm: e.WCFlags&uverbs.WCFlagImm != 0, Imm: binary.BigEndian.Uint32(e.ImmData[:]), Entry: e}, true
}

func (q verbsQP) QPN() uint32 { return q.q.QPN }

func sges(in []mr.SGE) []uverbs.SGE {
	out := make([]uverbs.SGE, len(in))
	for i, s := range in {
		out[i] = uverbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
	}
	return out
}

// wqe is wr as a PVRDMA send WQE (a fast-register's page list built in
// the guest memory of d).
func wqe(d *emutest.Driver, wr verbstest.SendWR) uverbs.SendWQE {
	w := send(sendOpcodes[wr.Opcode], wr.ID, 0, sges(wr.SGEs)...)
	switch wr.Opcode {
	case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
		w.SetRDMA(wr.RemoteAddr, wr.RKey)
	case transport.OpCompSwap, transport.OpFetchAdd:
		w.SetAtomic(wr.RemoteAddr, wr.CompareAdd, wr.Swap, wr.RKey)
	case transport.OpLocalInv, transport.OpSendInv:
		le.PutUint32(w.Ex[:], wr.InvalidateKey)
	case transport.OpFastReg:
		f := wr.FastReg
		w.SetFastReg(uverbs.FastReg{IOVA: f.IOVA, PageListDir: d.PageDir(f.Pages), PageShift: 12,
			PageListLen: uint32(len(f.Pages)), Length: f.Length, Access: pvrdmaAccess(f.Access), RKey: f.Key})
	}
	if wr.Opcode == transport.OpSendImm || wr.Opcode == transport.OpWriteImm {
		w.Ex = [4]byte{byte(wr.Imm >> 24), byte(wr.Imm >> 16), byte(wr.Imm >> 8), byte(wr.Imm)}
	}
	return w
}

func (q verbsQP) PostSend(wr verbstest.SendWR) { q.q.PostSend(wqe(q.d, wr)) }

func (q verbsQP) PostSends(wrs ...verbstest.SendWR) {
	for _, wr := range wrs {
		q.q.WriteSend(wqe(q.d, wr))
	}
	q.q.RingSend()
}

func (q verbsQP) PostRecv(wr verbstest.RecvWR) {
	q.q.PostRecv(uverbs.RecvWQE{WRID: wr.ID, SGE: sges(wr.SGEs)})
}
