package mlx5

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
)

// State is what the device holds, for hcaemu inspect, taken under the
// device lock in one piece: the function's state, the health syndrome,
// the port as its SMA reports it, the EQs, UARs and verbs objects the
// driver's commands made, the counters.
type State struct {
	Device string
	Model  string // mlx5
	// Function: disabled, enabled (ENABLE_HCA) or initialized (INIT_HCA).
	Function string
	// Fatal: the device is dead to its driver (a fault, strict mode's
	// latch, a panic in its work); HealthSyndrome is the health buffer's.
	Fatal          bool
	HealthSyndrome uint8
	DriverVersion  string `json:",omitempty"`
	Port           PortState
	UARs           []uint32
	EQs            []EQState
	PDs            []PDState
	Mkeys          []MkeyState
	CQs            []CQState
	QPs            []QPState
	SRQs           []SRQState
	PinnedPages    uint64
	Findings       map[string]uint64
	Stats          Stats
	Core           hca.DeviceStats
}

// PortState is port 1 as the SMA and the vport context report it.
type PortState struct {
	State     string // ACTIVE, or DOWN while a fault holds it down
	PhysState string // LinkUp or Disabled
	LID       uint16
	SMLID     uint16
	GID       string // the port GID: the subnet's prefix and the port GUID
	PortGUID  string
	NodeGUID  string
}

// EQState is an event queue.
type EQState struct {
	EQN       uint8
	Size      uint32
	Producer  uint32 // EQEs written
	Consumer  uint32 // the consumer index the driver last wrote
	Armed     bool
	Vector    int
	UAR       uint32
	Command   bool // takes command completions (event mode)
	CQs       int  // CQs completing to it
	EventMask [4]uint64
}

// PDState is a protection domain.
type PDState struct {
	PDN   uint32
	Users int // mkeys, QPs and SRQs in it
}

// MkeyState is a memory key.
type MkeyState struct {
	Index         uint32
	Key           uint32
	PD            uint32
	Kind          string // pa (the DMA key), mtt, klm (indirect: a fast-registered SG_GAPS MR), window (bound), or free
	Start, Length uint64
	Access        string
	Valid         bool
	Pages         int
}

// CQState is a completion queue.
type CQState struct {
	CQN      uint32
	Entries  uint32
	CQESize  uint32
	Producer uint32 // CQEs written
	EQN      uint8
	Armed    string // "", next or solicited
	Broken   bool   // a cq_error fault posted CQ_ERROR
	Users    int
}

// QPState is a queue pair.
type QPState struct {
	QPN            uint32
	Type, State    string
	PD             uint32
	SendCQ, RecvCQ uint32
	SRQ            uint32 `json:",omitempty"` // with rq_type SRQ
	// SQ and RQ sizes in WQEBBs and WQEs.
	SQ, RQ uint32
	// LID is the port's, RemoteLID the primary path's (RC, from RTR).
	LID, RemoteLID uint16
	DestQPN        uint32       `json:",omitempty"`
	PathMTU        int          `json:",omitempty"`
	RC             *rc.Snapshot `json:",omitempty"`
	Stats          hca.QPStats
}

// SRQState is a shared receive queue (an RMP or an XRC SRQ).
type SRQState struct {
	SRQN    uint32
	XRC     bool
	PD      uint32
	Entries uint32
	Limit   uint32
	Users   int
}

var funcStateNames = [...]string{stateDisabled: "disabled", stateEnabled: "enabled", stateInitialized: "initialized"}

// Inspect returns what the device holds.
func (d *Device) Inspect() State {
	d.core.Lock()
	defer d.core.Unlock()
	st := State{Device: d.name, Model: "mlx5", Function: funcStateNames[d.fn.state], Fatal: d.core.Fatal,
		HealthSyndrome: d.seg.synd, PinnedPages: uint64(d.fn.pins.Pinned()), Stats: d.stats}
	st.Stats.RxQueueFull = d.rxDropped.Load()
	v := d.fn.driverVersion[:]
	if i := slices.Index(v, 0); i >= 0 {
		v = v[:i]
	}
	st.DriverVersion = string(v)
	st.Port = PortState{State: "ACTIVE", PhysState: "LinkUp", LID: d.port.LID, SMLID: d.port.MasterSMLID,
		PortGUID: guidString(d.port.PortGUID), NodeGUID: guidString(d.port.NodeGUID),
		GID: gidString(d.port.GIDPrefix, d.port.PortGUID)}
	if d.port.PortState != mad.PortStateActive {
		st.Port.State, st.Port.PhysState = "DOWN", "Disabled"
	}
	st.UARs = slices.Sorted(maps.Keys(d.fn.uars))
	for _, n := range slices.Sorted(maps.Keys(d.fn.eqs)) {
		e := d.fn.eqs[n]
		st.EQs = append(st.EQs, EQState{EQN: n, Size: e.size(), Producer: e.pi, Consumer: e.ci, Armed: e.armed,
			Vector: e.intr, UAR: e.uar, Command: d.fn.cmdEQ == e, CQs: e.refs, EventMask: e.mask})
	}
	st.Core, _ = d.coreStatsLocked()
	st.Findings = st.Core.Findings
	o := &d.fn.obj
	if o.pds.Limit() == 0 {
		return st // before INIT_HCA
	}
	for _, h := range o.pds.Handles() {
		st.PDs = append(st.PDs, PDState{PDN: h, Users: o.pds.Get(h).refs})
	}
	for _, h := range o.mkeys.Handles() {
		m := o.mkeys.Get(h)
		kind := "mtt"
		switch {
		case m.DMA:
			kind = "pa"
		case !m.Valid:
			kind = "free"
		case m.Window != nil:
			kind = "window"
		case m.KLMs != nil:
			kind = "klm"
		}
		st.Mkeys = append(st.Mkeys, MkeyState{Index: h, Key: m.LKey, PD: m.PD, Kind: kind, Start: m.Start,
			Length: m.Length, Access: mr.AccessString(m.Access), Valid: m.Valid, Pages: len(m.Pages)})
	}
	for _, h := range o.cqs.Handles() {
		c := o.cqs.Get(h)
		armed := ""
		switch {
		case c.armed && c.armSol:
			armed = "solicited"
		case c.armed:
			armed = "next"
		}
		st.CQs = append(st.CQs, CQState{CQN: h, Entries: 1 << c.logSize, CQESize: c.cqeSize, Producer: c.pi,
			EQN: c.eqn, Armed: armed, Broken: c.broken, Users: c.refs})
	}
	for _, h := range o.qps.Handles() {
		st.QPs = append(st.QPs, d.inspectQP(o.qps.Get(h)))
	}
	for _, h := range o.srqs.Handles() {
		s := o.srqs.Get(h)
		pd := s.pd
		st.SRQs = append(st.SRQs, SRQState{SRQN: h, XRC: s.xrc, PD: pd, Entries: 1 << s.logSize, Limit: s.lwm, Users: s.refs})
	}
	return st
}

func (d *Device) inspectQP(q *qp) QPState {
	ctx := q.ctx[:]
	s := QPState{QPN: q.QPN, Type: stNames[uint32(q.st)], State: qpStateName(q.state), PD: q.PD,
		SendCQ: q.sndCQ, RecvCQ: q.rcvCQ, SQ: uint32(q.sqBytes / ifc.SendWQEBB), LID: d.port.LID, Stats: q.StatsNow()}
	if ifc.QPCRQType.Get(ctx) == ifc.RQTypeSRQ {
		s.SRQ = q.srqn
	}
	if q.rqBytes != 0 {
		s.RQ = uint32(q.rqBytes / (uint64(16) << ifc.QPCLogRQStride.Get(ctx)))
	}
	if classOf(q.st) != classUD && q.state >= ifc.QPStateRTR && q.state != ifc.QPStateERR || q.env != nil && q.env.dlid != 0 {
		s.RemoteLID = uint16(ifc.PriPath(ifc.ADSRLID).Get(ctx))
		s.DestQPN = ifc.QPCRemoteQPN.Get(ctx)
		if m := ifc.QPCMTU.Get(ctx); m >= 1 && m <= mtu4096 {
			s.PathMTU = 128 << m
		}
	}
	if q.RC != nil {
		snap := q.RC.Snapshot()
		s.RC = &snap
	}
	return s
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func gidString(prefix, guid uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x:", prefix>>48, prefix>>32&0xffff, prefix>>16&0xffff, prefix&0xffff) + guidString(guid)
}

// Observe implements hca.Observed.
func (d *Device) Observe() hca.Observation { st := d.Inspect(); return &st }

// Sections implements hca.Observation: gids is the port GID, mrs the
// mkeys; eqs the EQs.
func (st *State) Sections() hca.Sections {
	stats := struct {
		Engine   Stats
		Core     hca.DeviceStats
		Findings map[string]uint64
	}{st.Stats, st.Core, st.Findings}
	return hca.Sections{Devices: st, Ports: st.Port, GIDs: []string{st.Port.GID}, PDs: st.PDs, MRs: st.Mkeys,
		CQs: st.CQs, QPs: st.QPs, SRQs: st.SRQs, EQs: st.EQs, Stats: stats}
}

// Print implements hca.Observation.
func (st *State) Print(tw io.Writer, what string) {
	all := what == "devices"
	if all {
		fmt.Fprintf(tw, "  function\t%s\tfatal=%v health_syndrome %#x\tdriver %q\n", st.Function, st.Fatal, st.HealthSyndrome, st.DriverVersion)
	}
	if all || what == "ports" {
		p := &st.Port
		fmt.Fprintf(tw, "  port 1\tstate %s (%s)\tlid %d sm_lid %d\tport_guid %s\n", p.State, p.PhysState, p.LID, p.SMLID, p.PortGUID)
	}
	if all || what == "gids" {
		fmt.Fprintf(tw, "  gid 0\t%s\n", st.Port.GID)
	}
	if all || what == "eqs" {
		for _, e := range st.EQs {
			cmd := ""
			if e.Command {
				cmd = "\tcommands"
			}
			fmt.Fprintf(tw, "  eq %d\tentries %d\tprod %d cons %d\tarmed=%v\tvector %d uar %d\tcqs %d%s\n",
				e.EQN, e.Size, e.Producer, e.Consumer, e.Armed, e.Vector, e.UAR, e.CQs, cmd)
		}
	}
	if all || what == "pds" {
		for _, p := range st.PDs {
			fmt.Fprintf(tw, "  pd %d\tusers %d\n", p.PDN, p.Users)
		}
	}
	if all || what == "mrs" {
		// Free mkeys are counted, not listed: mlx5_ib's MR cache holds
		// thousands (--json lists them).
		free := 0
		for _, m := range st.Mkeys {
			if m.Kind == "free" {
				free++
				continue
			}
			fmt.Fprintf(tw, "  mkey %#x\t%s\tpd %d\t[%#x, +%#x)\t%s\tvalid=%v\tpages %d\n",
				m.Key, m.Kind, m.PD, m.Start, m.Length, m.Access, m.Valid, m.Pages)
		}
		if free > 0 {
			fmt.Fprintf(tw, "  mkeys free: %d (the kernel's MR cache, fast-register MRs between registrations, unbound windows; --json lists them)\n", free)
		}
	}
	if all || what == "cqs" {
		for _, c := range st.CQs {
			fmt.Fprintf(tw, "  cq %#x\tentries %d x %d B\tprod %d\teq %d\tarmed %q\tbroken=%v\tusers %d\n",
				c.CQN, c.Entries, c.CQESize, c.Producer, c.EQN, c.Armed, c.Broken, c.Users)
		}
	}
	if all || what == "qps" {
		for _, q := range st.QPs {
			fmt.Fprintf(tw, "  qp %#x\t%s %s\tpd %d\tcq %#x/%#x\tsq %d rq %d", q.QPN, q.Type, q.State, q.PD, q.SendCQ, q.RecvCQ, q.SQ, q.RQ)
			if q.SRQ != 0 {
				fmt.Fprintf(tw, " srq %#x", q.SRQ)
			}
			fmt.Fprintf(tw, "\tlid %d", q.LID)
			if q.RemoteLID != 0 {
				fmt.Fprintf(tw, "\tremote lid %d qpn %#x mtu %d", q.RemoteLID, q.DestQPN, q.PathMTU)
			}
			if r := q.RC; r != nil {
				fmt.Fprintf(tw, "\tnext_psn %#x unacked %#x outstanding %d retries_left %d rnr_left %d expected_psn %#x msn %d",
					r.NextPSN, r.UnackedPSN, r.Outstanding, r.RetriesLeft, r.RNRRetriesLeft, r.ExpectedPSN, r.MSN)
			}
			fmt.Fprintln(tw)
		}
	}
	if all || what == "srqs" {
		for _, s := range st.SRQs {
			kind := "rmp"
			if s.XRC {
				kind = "xrc"
			}
			fmt.Fprintf(tw, "  srq %#x\t%s\tpd %d\tentries %d\tlimit %d\tusers %d\n", s.SRQN, kind, s.PD, s.Entries, s.Limit, s.Users)
		}
	}
	if all || what == "stats" {
		s, c := &st.Stats, &st.Core
		fmt.Fprintf(tw, "  commands\ttaken %d delivered %d refused %d unanswered %d\n", s.Commands, s.Delivered, s.Refused, s.Unanswered)
		fmt.Fprintf(tw, "  eqes\t%d (commands %d)\toverruns %d\n", s.EQEs, s.CmdEQEs, s.EQOverruns)
		fmt.Fprintf(tw, "  data path\tsend doorbells %d\tcq arms %d\tcqes %d\tcq overruns %d\n", s.SendDoorbells, s.CQArms, s.CQEs, s.CQOverruns)
		p := &c.Port
		fmt.Fprintf(tw, "  port\tpackets in %d out %d\tbytes in %d out %d\n", p.FramesIn, p.FramesOut, p.BytesIn, p.BytesOut)
		fmt.Fprintf(tw, "  dropped\trx %d qkey %d rx_queue_full %d port_down %d\n", p.Malformed, p.QKey, p.RxQueueFull, p.PortDown)
		fmt.Fprintf(tw, "  pinned_pages\t%d\n", st.PinnedPages)
		for _, q := range st.QPs {
			qs := &q.Stats
			fmt.Fprintf(tw, "  qpn %#x\tpackets out %d in %d\tbytes out %d in %d\tretransmitted %d timeouts %d\n",
				q.QPN, qs.PacketsSent, qs.PacketsReceived, qs.BytesSent, qs.BytesReceived, qs.Retransmitted, qs.Timeouts)
		}
		hca.PrintCommands(tw, c.Commands, st.Findings)
	}
}
