package mlx5

import (
	"fmt"
	"syscall"
	"time"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The device as hcaemu inspect, trace and the metrics see it
// (hca.Observed): its counters in the core's vocabulary (the IB port's
// packets, every QP's counters, the commands by opcode and the errno
// mlx5_core makes of their status), the command engine's own counters
// (Stats), the trace events of its commands, packets, completions, QP
// states and EQEs, and a snapshot of what it holds (inspect.go).

// extras are the device's fault injection and observation state (lock
// held, but for what is atomic).
type extras struct {
	fault faultState
	port  portFault
	obs   observeState
}

// observeState is the tracer and the counters CoreStats reports.
type observeState struct {
	tracer hca.Tracer
	// retired are the counters of the QPs destroyed.
	retired hca.QPStats
	// cmds counts the commands by opcode and outcome.
	cmds map[cmdOutcome]uint64
}

// cmdOutcome is a command and the errno its driver made of its status.
type cmdOutcome struct {
	op    ifc.Opcode
	errno uint32
}

// statusErrnos is what mlx5_core's cmd_status_to_err makes of a command
// status (any other: EIO).
var statusErrnos = map[ifc.Status]syscall.Errno{
	ifc.StatOK: 0, ifc.StatIntErr: syscall.EIO, ifc.StatBadOpErr: syscall.EINVAL,
	ifc.StatBadParamErr: syscall.EINVAL, ifc.StatBadSysStateErr: syscall.EIO, ifc.StatBadResErr: syscall.EINVAL,
	ifc.StatResBusy: syscall.EBUSY, ifc.StatLimErr: syscall.ENOMEM, ifc.StatBadResStateErr: syscall.EINVAL,
	ifc.StatIxErr: syscall.EINVAL, ifc.StatNoResErr: syscall.EAGAIN, ifc.StatBadInpLenErr: syscall.EIO,
	ifc.StatBadOutpLenErr: syscall.EIO, ifc.StatBadQPStateErr: syscall.EINVAL, ifc.StatBadPktErr: syscall.EINVAL,
	ifc.StatBadSizeOutsCQEs: syscall.EINVAL,
}

// statusErrno is the errno the driver makes of status st.
func statusErrno(st ifc.Status) uint32 {
	if e, ok := statusErrnos[st]; ok {
		return uint32(e)
	}
	return uint32(syscall.EIO)
}

// Name is the device's name (Config.Name).
func (d *Device) Name() string { return d.name }

// Model implements hca.Observed.
func (d *Device) Model() string { return "mlx5" }

// SetTracer makes the device report its steps to t; nil stops it. With no
// tracer the device builds no events.
func (d *Device) SetTracer(t hca.Tracer) {
	d.core.Lock()
	defer d.core.Unlock()
	d.x.obs.tracer = t
	d.wire.Tracer = t // the batches' packets it receives (ib.go)
}

// trace hands ev to the tracer, stamped (lock held, tracer set).
func (d *Device) trace(ev *hca.TraceEvent) {
	ev.Time, ev.Device = time.Now(), d.name
	d.x.obs.tracer.Trace(ev)
}

// commandDone counts a command's outcome and traces it.
func (d *Device) commandDone(op ifc.Opcode, r result) {
	o := &d.x.obs
	if o.cmds == nil {
		o.cmds = map[cmdOutcome]uint64{}
	}
	k := cmdOutcome{op, statusErrno(r.status)}
	if _, known := o.cmds[k]; known || len(o.cmds) < maxCmdOutcomes {
		o.cmds[k]++ // a guest's stream of unknown opcodes cannot grow the map
	}
	if o.tracer != nil {
		ev := hca.TraceEvent{Event: "command", Command: op.String(), Status: r.status.String()}
		if r != ok {
			ev.Syndrome = fmt.Sprintf("%#x", r.synd)
		}
		d.trace(&ev)
	}
}

// maxCmdOutcomes bounds the commands counted apart (the opcodes and
// errnos seen); later ones of new kinds are not counted.
const maxCmdOutcomes = 1024

// sent counts and traces a packet QP q sent (n payload bytes, size bytes
// on the link; again: a request sent before).
func (d *Device) sent(q *qp, f *roce.PacketFields, n, size int, again bool) {
	p := &d.wire.Stats // the port's counters, its batches' included
	p.FramesOut++
	p.BytesOut += uint64(size)
	if d.x.obs.tracer != nil {
		psn := f.BTH.PSN
		ev := hca.TraceEvent{QPN: q.QPN, Event: "tx", Dir: "tx", PSN: &psn, Opcode: f.BTH.Opcode.String(),
			DestQPN: f.BTH.DestQP, Len: n}
		if again {
			ev.Event = "retransmit"
		}
		if info, _ := f.BTH.Opcode.Info(); info.Headers&roce.HasAETH != 0 {
			ev.Syndrome = f.AETH.Syndrome.String()
		}
		d.trace(&ev)
	}
}

// portIn counts a packet the port delivered (size bytes on the link),
// whatever becomes of it.
func (d *Device) portIn(size int) {
	p := &d.wire.Stats
	p.FramesIn++
	p.BytesIn += uint64(size)
}

// received traces a packet for QP q.
func (d *Device) received(q *qp, pkt *roce.Packet) {
	if d.x.obs.tracer != nil {
		psn := pkt.BTH.PSN()
		ev := hca.TraceEvent{QPN: q.QPN, Event: "rx", Dir: "rx", PSN: &psn, Opcode: pkt.Opcode().String(),
			DestQPN: pkt.BTH.DestQP(), Len: len(pkt.Payload)}
		if pkt.AETH != nil {
			ev.Syndrome = pkt.AETH.Syndrome().String()
		}
		d.trace(&ev)
	}
}

// traceState reports a QP's state when it changed since the last report.
func (d *Device) traceState(q *qp) {
	prev := q.fault.traced
	q.fault.traced = q.state
	if d.x.obs.tracer == nil || prev == q.state {
		return
	}
	d.trace(&hca.TraceEvent{QPN: q.QPN, Event: "state", From: qpStateName(prev), To: qpStateName(q.state)})
}

// traceCQE reports a completion written for QP q; its wr_id is the
// CQE's wqe_counter (the device never sees the application's wr_id).
func (d *Device) traceCQE(q *qp, c *transport.Completion) {
	if d.x.obs.tracer == nil {
		return
	}
	id := uint64(uint16(c.WRID)) // the CQE's wqe_counter (the provider maps it to the wr_id)
	ev := hca.TraceEvent{QPN: q.QPN, Event: "cqe", WRID: &id, Status: hca.WCStatusName(uint32(c.Status)), ByteLen: c.ByteLen,
		Recv: c.Recv, Opcode: hca.WROpcodeName(c.Opcode)}
	d.trace(&ev)
}

// traceEQE reports an EQE written, but for the completion and command
// ones (the cqe and command events say those): async, with the event's
// name as mlx5_eqe_type_str spells it, and its QP, CQ or SRQ.
func (d *Device) traceEQE(eqe *[ifc.EQESize]byte) {
	if d.x.obs.tracer == nil {
		return
	}
	typ := eqe[ifc.EQEType]
	if typ == ifc.EventComp || typ == ifc.EventCmd {
		return
	}
	ev := hca.TraceEvent{Event: "async", Async: eqeName(typ, eqe[ifc.EQESubType])}
	n := uint32(eqe[eqeQPNumber+1])<<16 | uint32(eqe[eqeQPNumber+2])<<8 | uint32(eqe[eqeQPNumber+3])
	switch typ {
	case ifc.EventWQCatasError, ifc.EventWQInvalReqError, ifc.EventWQAccessError:
		ev.QPN = n
	case eventSRQCatas, eventSRQRQLimit:
		ev.Handle = n
	case eventCQError:
		ev.Handle = uint32(eqe[eqeCQErrCQN+1])<<16 | uint32(eqe[eqeCQErrCQN+2])<<8 | uint32(eqe[eqeCQErrCQN+3])
	case ifc.EventPortChange:
		ev.Handle = uint32(eqe[eqePortChangePort] >> 4)
	}
	d.trace(&ev)
}

// eqeNames name the EQE types the device posts as mlx5_core does
// (eq.c: eqe_type_str).
var eqeNames = map[uint8]string{
	ifc.EventWQCatasError: "MLX5_EVENT_TYPE_WQ_CATAS_ERROR", ifc.EventWQInvalReqError: "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR",
	ifc.EventWQAccessError: "MLX5_EVENT_TYPE_WQ_ACCESS_ERROR", eventCQError: "MLX5_EVENT_TYPE_CQ_ERROR",
	eventSRQCatas: "MLX5_EVENT_TYPE_SRQ_CATAS_ERROR", eventSRQRQLimit: "MLX5_EVENT_TYPE_SRQ_RQ_LIMIT",
	ifc.EventPortChange: "MLX5_EVENT_TYPE_PORT_CHANGE", ifc.EventPageRequest: "MLX5_EVENT_TYPE_PAGE_REQUEST",
}

var portChangeNames = map[uint8]string{portChangeDown: "DOWN", portChangeActive: "ACTIVE", portChangeGUID: "GUID"}

func eqeName(typ, sub uint8) string {
	name, ok := eqeNames[typ]
	if !ok {
		name = fmt.Sprintf("EQE type %#x", typ)
	}
	if typ == ifc.EventPortChange {
		if s, ok := portChangeNames[sub]; ok {
			return name + " " + s
		}
		return fmt.Sprintf("%s %d", name, sub)
	}
	return name
}

func qpStateName(s uint8) string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// retire moves a QP's counters into the device's totals (it is going
// away).
func (d *Device) retire(q *qp) {
	st := q.StatsNow()
	d.x.obs.retired.Add(&st)
}

// CoreStats implements hca.Observed: the IB port's packets (frames are
// whole IB packets, LRH to VCRC), the drops, every QP's counters, the
// commands by opcode and errno, the EQEs lost to full EQs and the
// strict-mode findings.
func (d *Device) CoreStats() (hca.DeviceStats, map[uint32]hca.QPStats) {
	d.core.Lock()
	defer d.core.Unlock()
	return d.coreStatsLocked()
}

func (d *Device) coreStatsLocked() (hca.DeviceStats, map[uint32]hca.QPStats) {
	o := &d.x.obs
	st := hca.DeviceStats{Port: d.wire.Stats, QPs: o.retired, EventsLost: d.stats.EQOverruns, CQNotificationsLost: d.stats.CQOverruns}
	st.Port.Malformed = d.stats.RxDropped - d.stats.RxAddress + d.wire.Stats.Malformed
	st.Port.Address = d.stats.RxAddress
	st.Port.QKey = d.stats.QKeyViolations
	st.Port.RxQueueFull = d.rxDropped.Load()
	st.Port.PortDown = d.x.port.lost.Load()
	qps := map[uint32]hca.QPStats{}
	if d.fn.obj.qps.Limit() != 0 {
		for _, h := range d.fn.obj.qps.Handles() {
			q := d.fn.obj.qps.Get(h)
			qs := q.StatsNow()
			qps[q.QPN] = qs
			st.QPs.Add(&qs)
		}
	}
	for k, n := range o.cmds {
		st.Commands = append(st.Commands, hca.CommandCount{Command: k.op.String(), Errno: k.errno, Count: n})
	}
	hca.SortCommands(st.Commands)
	st.Findings = hca.FindingCounts(d.Findings())
	return st, qps
}

// ModelStats implements hca.Observed: the command engine's and data
// path's counters (Stats).
func (d *Device) ModelStats() []hca.NamedCount {
	s := d.Stats()
	return []hca.NamedCount{
		{Name: "commands", Help: "Command descriptors taken (ownership bit set).", Value: s.Commands},
		{Name: "commands_delivered", Help: "Commands answered with delivery status OK.", Value: s.Delivered},
		{Name: "commands_refused", Help: "Commands answered with another delivery status.", Value: s.Refused},
		{Name: "commands_unanswered", Help: "Command doorbells for a slot the device could not read or did not own.", Value: s.Unanswered},
		{Name: "uar_writes", Help: "Writes to UAR pages.", Value: s.UARWrites},
		{Name: "eqes", Help: "EQEs written.", Value: s.EQEs},
		{Name: "cmd_eqes", Help: "Command completion EQEs written (event mode).", Value: s.CmdEQEs},
		{Name: "eq_overruns", Help: "EQEs dropped: their EQ was full.", Value: s.EQOverruns},
		{Name: "send_doorbells", Help: "Send doorbells that kicked a QP.", Value: s.SendDoorbells},
		{Name: "cq_arms", Help: "CQ arm doorbells taken.", Value: s.CQArms},
		{Name: "cqes", Help: "CQEs written.", Value: s.CQEs},
		{Name: "cq_overruns", Help: "CQEs dropped: their CQ was full.", Value: s.CQOverruns},
		{Name: "rx_dropped", Help: "IB packets the device took and dropped.", Value: s.RxDropped},
		{Name: "rx_queue_full", Help: "IB packets refused: the engine's receive queue was full.", Value: s.RxQueueFull},
		{Name: "qkey_violations", Help: "Datagrams a UD or GSI QP dropped for their Q_Key.", Value: s.QKeyViolations},
		{Name: "umr_translations", Help: "UMR WQEs that loaded MTT entries into an mkey (the MR cache's registrations).", Value: s.UMRTranslations},
		{Name: "fast_reg_mtt", Help: "Fast registrations (IB_WR_REG_MR) of MTT mkeys on kernel QPs.", Value: s.FastRegMTT},
		{Name: "fast_reg_klm", Help: "Fast registrations (IB_WR_REG_MR) of KLM mkeys (SG_GAPS MRs) on kernel QPs.", Value: s.FastRegKLM},
		{Name: "umr_invalidations", Help: "UMR WQEs that made an mkey free (LOCAL_INV, the revoke).", Value: s.UMRInvalidations},
		{Name: "umr_refused", Help: "Kernel UMR WQEs refused with an error CQE.", Value: s.UMRRefused},
		{Name: "port_down_lost", Help: "IB packets lost to the port held down by a fault (both ways).", Value: d.x.port.lost.Load()},
	}
}

var _ hca.Observed = (*Device)(nil)
