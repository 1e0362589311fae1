package hca

import "github.com/hcaemu/hcaemu/emu/roce"

// The HCA's counters: per QP and per device (its one port), as an HCA's
// hw_counters and port counters are. A device changes them under its lock,
// one increment per event on the data path, and reads them under it.

// NAKCounts counts NAKs by their code (IBTA 9.7.5.2.4; rocev2.md §3.5).
type NAKCounts struct {
	PSNSequence       uint64 `json:"psn_sequence"`
	InvalidRequest    uint64 `json:"invalid_request"`
	RemoteAccess      uint64 `json:"remote_access"`
	RemoteOperational uint64 `json:"remote_operational"`
	InvalidRDRequest  uint64 `json:"invalid_rd_request"`
}

// Count counts one NAK of code code.
func (n *NAKCounts) Count(code roce.NAKCode) {
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

// Add adds o's counts.
func (n *NAKCounts) Add(o NAKCounts) {
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

// Add adds o's counts.
func (s *QPStats) Add(o *QPStats) {
	s.PacketsSent += o.PacketsSent
	s.BytesSent += o.BytesSent
	s.PacketsReceived += o.PacketsReceived
	s.BytesReceived += o.BytesReceived
	s.Retransmitted += o.Retransmitted
	s.Timeouts += o.Timeouts
	s.NAKsSent.Add(o.NAKsSent)
	s.NAKsReceived.Add(o.NAKsReceived)
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
	// RxQueueFull: frames refused because the device's receive queue was
	// full (the sender backs off and sends them again).
	RxQueueFull uint64 `json:"dropped_rx_queue_full"`
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
	// EventsLost and CQNotificationsLost: async events and CQ
	// notifications the device could not post (the driver's ring full,
	// broken by a bad index, or not mapped).
	EventsLost          uint64 `json:"async_events_lost"`
	CQNotificationsLost uint64 `json:"cq_notifications_lost"`
	// Findings are the strict-mode findings by kind.
	Findings map[string]uint64 `json:"findings,omitempty"`
}
