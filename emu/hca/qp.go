package hca

import (
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	"github.com/hcaemu/hcaemu/emu/transport/ud"
)

// QP is a queue pair as every model has it: its handle (the driver's index)
// and number (the wire's), its protection domain, its transport object (an
// RC requester and responder, or a UD or GSI service: bound when it first
// leaves RESET) and its counters. A device model keeps its own QP (rings,
// attributes, the model's state) around it.
type QP struct {
	Handle, QPN uint32
	PD          uint32
	RC          *rc.QP
	UD          *ud.QP
	// Stats are the QP's counters; txHigh the highest request PSN sent
	// (a request at or before it is a retransmission).
	Stats   QPStats
	txHigh  uint32
	txValid bool
	// timer is the QP's timer (Core.ArmTimer, StopTimer, TimerExpired).
	timer qpTimer
}

// CountTx counts a packet a QP sent: f is its headers, n its payload
// bytes. It reports whether the packet is a request sent again.
func (qp *QP) CountTx(f *roce.PacketFields, n int) (again bool) {
	qp.Stats.PacketsSent++
	qp.Stats.BytesSent += uint64(n)
	info, _ := f.BTH.Opcode.Info()
	switch {
	case info.Headers&roce.HasAETH != 0:
		switch syn := f.AETH.Syndrome; {
		case syn.IsRNRNAK():
			qp.Stats.RNRNAKsSent++
		case syn.IsNAK():
			qp.Stats.NAKsSent.Count(syn.NAKCode())
		}
	case !info.Response && qp.RC != nil:
		// A request at or before the highest PSN sent is sent again.
		psn := f.BTH.PSN
		if qp.txValid && roce.PSNDiff(psn, qp.txHigh) <= 0 {
			qp.Stats.Retransmitted++
			return true
		}
		qp.txHigh, qp.txValid = psn, true
	}
	return false
}

// CountTxRun counts a run of run packets (bytes of payload in all) a QP
// sent, the PSNs at or before the highest one sent as retransmitted.
func (qp *QP) CountTxRun(f *roce.PacketFields, bytes, run int) {
	qp.Stats.PacketsSent += uint64(run)
	qp.Stats.BytesSent += uint64(bytes)
	first := f.BTH.PSN
	last := roce.PSNAdd(first, run-1)
	if qp.txValid {
		if behind := int(roce.PSNDiff(qp.txHigh, first)); behind >= 0 {
			qp.Stats.Retransmitted += uint64(min(behind+1, run))
		}
	}
	if !qp.txValid || roce.PSNDiff(last, qp.txHigh) > 0 {
		qp.txHigh, qp.txValid = last, true
	}
}

// CountRx counts a packet a QP received (run packets, for a run; payload
// bytes in all).
func (qp *QP) CountRx(pkt *roce.Packet, run, payload int) {
	qp.Stats.PacketsReceived += uint64(run)
	qp.Stats.BytesReceived += uint64(payload)
	if pkt.AETH != nil {
		switch syn := pkt.AETH.Syndrome(); {
		case syn.IsRNRNAK():
			qp.Stats.RNRNAKsReceived++
		case syn.IsNAK():
			qp.Stats.NAKsReceived.Count(syn.NAKCode())
		}
	}
}

// StatsNow is the QP's counters, its transport's included.
func (qp *QP) StatsNow() QPStats {
	st := qp.Stats
	if qp.RC != nil {
		rs := qp.RC.Stats()
		st.Timeouts += rs.Timeouts
		st.Duplicates += rs.Duplicates
		st.OutOfSequence += rs.OutOfSequence
	}
	return st
}
