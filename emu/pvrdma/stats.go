package pvrdma

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// The HCA's counters: per QP and per device (its one port), as an HCA's
// hw_counters and port counters are. They are plain integers changed under
// the device lock, one increment per event on the data path, and read under
// it (Stats, Inspect). A destroyed QP's counts move into the device's totals,
// so those never go backwards while the device lives (resets included).

// deviceCounters are the device's own counts (d.mu).
type deviceCounters struct {
	port    hca.PortStats
	retired hca.QPStats // of the QPs destroyed
	// Entries the device could not post to its rings (event, notifyCQ).
	eventsLost, cqNotifyLost uint64
	cmdOK                    [abi.NumOpcodes]uint64
	cmdErr                   map[cmdOutcome]uint64
}

type cmdOutcome struct {
	op    abi.Opcode
	errno uint32
}

// countCommand counts a command's outcome (errno 0: success).
func (d *Device) countCommand(op abi.Opcode, errno uint32) {
	if errno == 0 && op < abi.NumOpcodes {
		d.stats.cmdOK[op]++
		return
	}
	if d.stats.cmdErr == nil {
		d.stats.cmdErr = map[cmdOutcome]uint64{}
	}
	d.stats.cmdErr[cmdOutcome{op, errno}]++
}

// retire moves a QP's counts into the device's totals (it is going away).
// A QP that sent requests again says so in the log (at info), with its QPN
// as the guest knows it: the per-QP counter outlives the QP there, for
// whoever reads a capture of its traffic (a go-back-N resumption in the
// middle of a message is the sender's doing, not the wire's).
func (d *Device) retire(qp *qp) {
	st := qp.StatsNow()
	if st.Retransmitted > 0 {
		d.log.Info("QP retransmitted", "qpn", fmt.Sprintf("%#x", qp.QPN), "retransmitted", st.Retransmitted,
			"timeouts", st.Timeouts, "psn_sequence_naks", st.NAKsReceived.PSNSequence, "rnr_naks", st.RNRNAKsReceived)
	}
	d.stats.retired.Add(&st)
	qp.Stats = hca.QPStats{}
}

// Stats returns the device's counters, and each live QP's by QPN.
func (d *Device) Stats() (hca.DeviceStats, map[uint32]hca.QPStats) {
	d.core.Lock()
	defer d.unlock()
	return d.statsLocked()
}

func (d *Device) statsLocked() (hca.DeviceStats, map[uint32]hca.QPStats) {
	st := hca.DeviceStats{Port: d.wire.Stats, QPs: d.stats.retired,
		EventsLost: d.stats.eventsLost, CQNotificationsLost: d.stats.cqNotifyLost}
	st.Port.RxQueueFull = d.core.RxDrops()
	qps := map[uint32]hca.QPStats{}
	for _, h := range d.res.qp.handles() {
		qp := d.res.qp.get(h)
		qs := qp.StatsNow()
		qps[qp.QPN] = qs
		st.QPs.Add(&qs)
	}
	for op, n := range d.stats.cmdOK {
		if n > 0 {
			st.Commands = append(st.Commands, hca.CommandCount{Command: abi.Opcode(op).String(), Count: n})
		}
	}
	for k, n := range d.stats.cmdErr {
		name := "?"
		if k.op < abi.NumOpcodes {
			name = k.op.String()
		}
		st.Commands = append(st.Commands, hca.CommandCount{Command: name, Errno: k.errno, Count: n})
	}
	hca.SortCommands(st.Commands)
	st.Findings = hca.FindingCounts(d.Findings())
	return st, qps
}
