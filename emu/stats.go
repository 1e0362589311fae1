package emu

import (
	"fmt"
	"slices"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// The HCA's counters: per QP and per device (its one port), as an HCA's
// hw_counters and port counters are. They are plain integers changed under
// the device lock, one increment per event on the data path, and read under
// it (Stats, Inspect). A destroyed QP's counts move into the device's totals,
// so those never go backwards while the device lives (resets included).

// NAKCounts counts NAKs by their code (IBTA 9.7.5.2.4; rocev2.md §3.5).
type NAKCounts struct {
	PSNSequence       uint64 `json:"psn_sequence"`
	InvalidRequest    uint64 `json:"invalid_request"`
	RemoteAccess      uint64 `json:"remote_access"`
	RemoteOperational uint64 `json:"remote_operational"`
	InvalidRDRequest  uint64 `json:"invalid_rd_request"`
}

func (n *NAKCounts) count(code roce.NAKCode) {
	switch code {
	case roce.NAKPSNSequenceError:
		n.PSNSequence++
	case roce.NAKInvalidRequest:
		n.InvalidRequest++
	case roce.NAKRemoteAccessError:
		n.RemoteAccess++
	case roce.NAKRemoteOperationalErr:
		n.RemoteOperational++
	case roce.NAKInvalidRDRequest:
		n.InvalidRDRequest++
	}
}

func (n *NAKCounts) add(o NAKCounts) {
	n.PSNSequence += o.PSNSequence
	n.InvalidRequest += o.InvalidRequest
	n.RemoteAccess += o.RemoteAccess
	n.RemoteOperational += o.RemoteOperational
	n.InvalidRDRequest += o.InvalidRDRequest
}

// QPStats are one QP's counters (or, in DeviceStats, every QP's of the
// device, the destroyed ones included). Bytes are payload bytes.
type QPStats struct {
	PacketsSent     uint64 `json:"packets_sent"`
	BytesSent       uint64 `json:"bytes_sent"`
	PacketsReceived uint64 `json:"packets_received"`
	BytesReceived   uint64 `json:"bytes_received"`
	// Retransmitted: request packets sent again (a timeout, a sequence
	// NAK, the end of an RNR wait); Timeouts: the retransmission timer's
	// expiries.
	Retransmitted uint64 `json:"retransmitted"`
	Timeouts      uint64 `json:"timeouts"`
	// NAKs sent (as responder) and received (as requester), by code; RNR
	// NAKs apart.
	NAKsSent        NAKCounts `json:"naks_sent"`
	NAKsReceived    NAKCounts `json:"naks_received"`
	RNRNAKsSent     uint64    `json:"rnr_naks_sent"`
	RNRNAKsReceived uint64    `json:"rnr_naks_received"`
	// Duplicates: requests received again (answered, not executed);
	// OutOfSequence: requests ahead of the expected PSN (dropped, one NAK).
	Duplicates    uint64 `json:"duplicates"`
	OutOfSequence uint64 `json:"out_of_sequence"`
}

func (s *QPStats) add(o *QPStats) {
	s.PacketsSent += o.PacketsSent
	s.BytesSent += o.BytesSent
	s.PacketsReceived += o.PacketsReceived
	s.BytesReceived += o.BytesReceived
	s.Retransmitted += o.Retransmitted
	s.Timeouts += o.Timeouts
	s.NAKsSent.add(o.NAKsSent)
	s.NAKsReceived.add(o.NAKsReceived)
	s.RNRNAKsSent += o.RNRNAKsSent
	s.RNRNAKsReceived += o.RNRNAKsReceived
	s.Duplicates += o.Duplicates
	s.OutOfSequence += o.OutOfSequence
}

// PortStats count the frames (whole Ethernet frames) through port 1, and
// the received ones dropped before a QP took them, by reason.
type PortStats struct {
	FramesOut uint64 `json:"frames_out"`
	BytesOut  uint64 `json:"bytes_out"`
	FramesIn  uint64 `json:"frames_in"`
	BytesIn   uint64 `json:"bytes_in"`
	// Dropped on receive: not a RoCEv2 frame for us (Malformed), bad ICRC,
	// no QP of that number (NoQP), not from the RC QP's connection
	// (Address), a UD datagram with the wrong Q_Key (QKey), the port held
	// down by a fault (PortDown: sent frames lost too), a lent payload
	// revoked (Revoked).
	Malformed uint64 `json:"dropped_malformed"`
	BadICRC   uint64 `json:"dropped_bad_icrc"`
	NoQP      uint64 `json:"dropped_no_qp"`
	Address   uint64 `json:"dropped_address"`
	QKey      uint64 `json:"dropped_qkey"`
	PortDown  uint64 `json:"dropped_port_down"`
	// Revoked: packets of runs whose payload, lent by the sending HCA of
	// this process, was no longer its to lend (a region changed meanwhile).
	Revoked uint64 `json:"dropped_revoked"`
}

// CommandCount is how often a command ended one way: Errno 0 is success,
// else the errno the driver saw in ERR.
type CommandCount struct {
	Command string `json:"command"`
	Errno   uint32 `json:"errno"`
	Count   uint64 `json:"count"`
}

// DeviceStats are a device's counters.
type DeviceStats struct {
	Port     PortStats      `json:"port"`
	QPs      QPStats        `json:"qps"` // every QP's, live and destroyed
	Commands []CommandCount `json:"commands"`
	// Findings are the strict-mode findings by kind.
	Findings map[string]uint64 `json:"findings,omitempty"`
}

// deviceCounters are the device's own counts (d.mu).
type deviceCounters struct {
	port    PortStats
	retired QPStats // of the QPs destroyed
	cmdOK   [pvrdma.NumOpcodes]uint64
	cmdErr  map[cmdOutcome]uint64
}

type cmdOutcome struct {
	op    pvrdma.Opcode
	errno uint32
}

// countCommand counts a command's outcome (errno 0: success).
func (d *Device) countCommand(op pvrdma.Opcode, errno uint32) {
	if errno == 0 && op < pvrdma.NumOpcodes {
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
	st := qp.statsNow()
	if st.Retransmitted > 0 {
		d.log.Info("QP retransmitted", "qpn", fmt.Sprintf("%#x", qp.qpn), "retransmitted", st.Retransmitted,
			"timeouts", st.Timeouts, "psn_sequence_naks", st.NAKsReceived.PSNSequence, "rnr_naks", st.RNRNAKsReceived)
	}
	d.stats.retired.add(&st)
	qp.stats = QPStats{}
}

// countTx counts a packet a QP sent: f is its headers, n its payload
// bytes. It reports whether the packet is a request sent again.
func (qp *qp) countTx(f *roce.PacketFields, n int) (again bool) {
	qp.stats.PacketsSent++
	qp.stats.BytesSent += uint64(n)
	info, _ := f.BTH.Opcode.Info()
	switch {
	case info.Headers&roce.HasAETH != 0:
		switch syn := f.AETH.Syndrome; {
		case syn.IsRNRNAK():
			qp.stats.RNRNAKsSent++
		case syn.IsNAK():
			qp.stats.NAKsSent.count(syn.NAKCode())
		}
	case !info.Response && qp.rc != nil:
		// A request at or before the highest PSN sent is sent again.
		psn := f.BTH.PSN
		if qp.txValid && roce.PSNDiff(psn, qp.txHigh) <= 0 {
			qp.stats.Retransmitted++
			return true
		}
		qp.txHigh, qp.txValid = psn, true
	}
	return false
}

// countTxRun counts a run of run packets (bytes of payload in all) a QP
// sent, the PSNs at or before the highest one sent as retransmitted.
func (qp *qp) countTxRun(f *roce.PacketFields, bytes, run int) {
	qp.stats.PacketsSent += uint64(run)
	qp.stats.BytesSent += uint64(bytes)
	first := f.BTH.PSN
	last := roce.PSNAdd(first, run-1)
	if qp.txValid {
		if behind := int(roce.PSNDiff(qp.txHigh, first)); behind >= 0 {
			qp.stats.Retransmitted += uint64(min(behind+1, run))
		}
	}
	if !qp.txValid || roce.PSNDiff(last, qp.txHigh) > 0 {
		qp.txHigh, qp.txValid = last, true
	}
}

// countRx counts a packet a QP received (run packets, for a run; payload
// bytes in all).
func (qp *qp) countRx(pkt *roce.Packet, run, payload int) {
	qp.stats.PacketsReceived += uint64(run)
	qp.stats.BytesReceived += uint64(payload)
	if pkt.AETH != nil {
		switch syn := pkt.AETH.Syndrome(); {
		case syn.IsRNRNAK():
			qp.stats.RNRNAKsReceived++
		case syn.IsNAK():
			qp.stats.NAKsReceived.count(syn.NAKCode())
		}
	}
}

// statsNow is the QP's counters, its transport's included.
func (qp *qp) statsNow() QPStats {
	st := qp.stats
	if qp.rc != nil {
		rs := qp.rc.Stats()
		st.Timeouts += rs.Timeouts
		st.Duplicates += rs.Duplicates
		st.OutOfSequence += rs.OutOfSequence
	}
	return st
}

// Stats returns the device's counters, and each live QP's by QPN.
func (d *Device) Stats() (DeviceStats, map[uint32]QPStats) {
	d.mu.Lock()
	defer d.unlock()
	return d.statsLocked()
}

func (d *Device) statsLocked() (DeviceStats, map[uint32]QPStats) {
	st := DeviceStats{Port: d.stats.port, QPs: d.stats.retired}
	qps := map[uint32]QPStats{}
	for _, h := range d.res.qp.handles() {
		qp := d.res.qp.get(h)
		qs := qp.statsNow()
		qps[qp.qpn] = qs
		st.QPs.add(&qs)
	}
	for op, n := range d.stats.cmdOK {
		if n > 0 {
			st.Commands = append(st.Commands, CommandCount{Command: pvrdma.Opcode(op).String(), Count: n})
		}
	}
	for k, n := range d.stats.cmdErr {
		name := "?"
		if k.op < pvrdma.NumOpcodes {
			name = k.op.String()
		}
		st.Commands = append(st.Commands, CommandCount{Command: name, Errno: k.errno, Count: n})
	}
	slices.SortFunc(st.Commands, func(a, b CommandCount) int {
		if a.Command != b.Command {
			if a.Command < b.Command {
				return -1
			}
			return 1
		}
		return int(a.Errno) - int(b.Errno)
	})
	st.Findings = map[string]uint64{}
	for k, n := range d.Findings() {
		if n > 0 {
			st.Findings[FindingKind(k).String()] = n
		}
	}
	return st, qps
}
