package pvrdma

import (
	"net"
	"net/netip"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// State is what a device holds, for hcaemu inspect: the device-side mirror
// of the guest's "rdma resource show", taken under the device lock in one
// piece. Guest-owned ring indices are read from guest memory as they are
// at that moment (the device's own are authoritative).
type State struct {
	Device string
	// Active: the driver loaded a DSR and activated the device. Fatal:
	// DEVICE_FATAL was declared (a panic in the engine, a fault, strict
	// mode's latch).
	Active, Fatal bool
	Port          PortState
	GIDs          []GIDState
	Contexts      []ContextState
	PDs           []PDState
	MRs           []MRState
	CQs           []CQState
	QPs           []QPState
	SRQs          []SRQState
	// PinnedPages: page-list entries held for all objects.
	PinnedPages uint64
	Counters    Counters
	// Findings: strict-mode findings by kind (FindingKind.String()).
	Findings map[string]uint64
	// Stats are the device's counters (stats.go).
	Stats hca.DeviceStats
}

// PortState is port 1.
type PortState struct {
	State string // ACTIVE or DOWN (a fault holds it down)
	MAC   string // source MAC of RoCE frames
}

// GIDState is one valid GID table entry.
type GIDState struct {
	Index int
	GID   string
	Type  string // RoCEv1 or RoCEv2
}

// ContextState is a user context (ucontext) and the UAR page it owns.
type ContextState struct {
	Handle, UARPage uint32
}

// PDState is a protection domain.
type PDState struct {
	Handle, Context uint32
	Users           int // MRs, QPs and SRQs in it
}

// MRState is a memory region.
type MRState struct {
	Handle, PD, Context uint32
	Kind                string // user, dma or frmr
	LKey, RKey          uint32
	Start, Length       uint64
	Access              string
	Valid               bool // FRMRs: registered
}

// RingState is a work or completion queue's ring: its size and indices
// (the device's and the guest's as last read).
type RingState struct {
	Entries    uint32
	Prod, Cons uint32
}

// CQState is a completion queue.
type CQState struct {
	Handle, Context uint32
	Ring            RingState
	Armed           string // "", next or solicited
	Broken          bool   // CQ_ERR posted: overrun or bad index
	Users           int
}

// QPState is a queue pair.
type QPState struct {
	Handle, QPN     uint32
	Type, State     string
	PD, Context     uint32
	SendCQ, RecvCQ  uint32
	SRQ             uint32 `json:",omitempty"`
	SQ              RingState
	RQ              *RingState `json:",omitempty"` // nil with an SRQ
	DestQPN         uint32
	Peer            string `json:",omitempty"` // the path's destination GID
	PathMTU         int    `json:",omitempty"`
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	SQPSN, RQPSN    uint32
	RC              *rc.Snapshot `json:",omitempty"`
	PendingFaultErr bool         `json:",omitempty"`
	Stats           hca.QPStats
}

// SRQState is a shared receive queue.
type SRQState struct {
	Handle, PD, Context uint32
	Ring                RingState
	Limit               uint32
	Users               int
}

// Inspect returns what the device holds.
func (d *Device) Inspect() State {
	d.core.Lock()
	defer d.unlock()
	r := &d.res
	st := State{Device: d.name, Active: d.active, Fatal: d.core.Fatal, PinnedPages: r.pins.Pinned(),
		Counters: Counters{QKeyViolations: d.wire.QKeyViolations},
		Findings: hca.FindingCounts(d.Findings())}
	st.Port.State = "ACTIVE"
	if d.wire.Down {
		st.Port.State = "DOWN"
	}
	st.Port.MAC = net.HardwareAddr(d.wire.MAC[:]).String()
	for i, g := range r.gids {
		if g.Valid {
			typ := "RoCEv2"
			if g.Type == abi.GIDTypeFlagRoCEv1 {
				typ = "RoCEv1"
			}
			st.GIDs = append(st.GIDs, GIDState{Index: i, GID: g.String(), Type: typ})
		}
	}
	for _, h := range r.uc.handles() {
		st.Contexts = append(st.Contexts, ContextState{Handle: h, UARPage: r.uc.get(h).uar})
	}
	for _, h := range r.pd.handles() {
		p := r.pd.get(h)
		st.PDs = append(st.PDs, PDState{Handle: h, Context: p.ctx, Users: p.refs})
	}
	for _, h := range r.mr.handles() {
		m := r.mr.get(h)
		kind := "user"
		switch {
		case m.DMA:
			kind = "dma"
		case m.FRMR:
			kind = "frmr"
		}
		st.MRs = append(st.MRs, MRState{Handle: h, PD: m.PD, Context: m.Ctx, Kind: kind, LKey: m.LKey, RKey: m.RKey,
			Start: m.Start, Length: m.Length, Access: mr.AccessString(m.Access), Valid: m.Valid})
	}
	for _, h := range r.cq.handles() {
		c := r.cq.get(h)
		cons, _ := dma.LoadUint32(d.mem, c.pages[0]+uverbs.RxConsHead)
		armed := ""
		switch c.armed {
		case armNext:
			armed = "next"
		case armSolicited:
			armed = "solicited"
		}
		st.CQs = append(st.CQs, CQState{Handle: h, Context: c.ctx, Ring: RingState{Entries: c.ring.N, Prod: c.prod, Cons: cons},
			Armed: armed, Broken: c.broken, Users: c.refs})
	}
	for _, h := range r.qp.handles() {
		st.QPs = append(st.QPs, d.inspectQP(r.qp.get(h)))
	}
	for _, h := range r.srq.handles() {
		s := r.srq.get(h)
		prod, _ := dma.LoadUint32(d.mem, s.pages[0]+s.q.prodOff)
		st.SRQs = append(st.SRQs, SRQState{Handle: h, PD: s.pd, Context: s.ctx,
			Ring: RingState{Entries: s.q.ring.N, Prod: prod, Cons: s.q.cons}, Limit: s.limit, Users: s.refs})
	}
	st.Stats, _ = d.statsLocked()
	return st
}

func (d *Device) inspectQP(qp *qp) QPState {
	a := &qp.attr
	q := QPState{Handle: qp.Handle, QPN: qp.QPN, Type: qpTypeName(qp.typ), State: stateNames[qp.state],
		PD: qp.PD, Context: qp.ctx, SendCQ: qp.sendCQ, RecvCQ: qp.recvCQ, SRQ: qp.srq,
		DestQPN: a.DestQPN, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		SQPSN: a.SQPSN, RQPSN: a.RQPSN, PendingFaultErr: qp.faultErr || qp.faultHasEvent}
	prod, _ := dma.LoadUint32(d.mem, qp.pages[0]+qp.sq.prodOff)
	q.SQ = RingState{Entries: qp.sq.ring.N, Prod: prod, Cons: qp.sq.cons}
	if qp.srq == 0 {
		prod, _ := dma.LoadUint32(d.mem, qp.pages[0]+qp.rq.prodOff)
		q.RQ = &RingState{Entries: qp.rq.ring.N, Prod: prod, Cons: qp.rq.cons}
	}
	if qp.typ == abi.QPTypeRC && qp.state >= abi.QPStateRTR {
		q.Peer = netip.AddrFrom16(a.AH.DGID).String()
		if a.PathMTU >= 1 && a.PathMTU <= abi.MTU4096 {
			q.PathMTU = 128 << a.PathMTU
		}
	}
	if qp.RC != nil {
		snap := qp.RC.Snapshot()
		q.RC = &snap
	}
	q.Stats = qp.StatsNow()
	return q
}
