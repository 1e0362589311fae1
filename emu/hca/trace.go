package hca

import "time"

// TraceEvent is one step in the life of a QP as the HCA sees it: a work
// request taken from the send queue, a packet out or in, a completion
// written, a state change, an async event. The names follow the fault log
// (time, device, qpn, dir, psn, opcode), so a trace and a fault log merge
// into one story ordered by time.
type TraceEvent struct {
	Time   time.Time `json:"time"`
	Device string    `json:"device"`
	// QPN is the QP's number as the guest knows it (0: a device event, not
	// a QP's: a port or CQ event).
	QPN uint32 `json:"qpn,omitempty"`
	// Event: wqe, tx, retransmit, rx, dropped, cqe, state, async,
	// command.
	Event string `json:"event"`
	// Command is a command's name (command; its outcome in Status, a
	// failure's syndrome in Syndrome where the model has one).
	Command string `json:"command,omitempty"`
	// Packets (tx, retransmit, rx).
	Dir      string  `json:"dir,omitempty"` // tx or rx
	PSN      *uint32 `json:"psn,omitempty"`
	Opcode   string  `json:"opcode,omitempty"`   // the BTH opcode; for wqe and cqe the work request's
	Syndrome string  `json:"syndrome,omitempty"` // an ACK's AETH: ACK, NAK(...), RNR NAK(...); a failed command's syndrome
	DestQPN  uint32  `json:"dest_qpn,omitempty"`
	Len      int     `json:"len,omitempty"` // payload bytes
	// Dropped says why a received packet was dropped before its QP saw it.
	Dropped string `json:"dropped,omitempty"`
	// Work requests and completions (wqe, cqe).
	WRID    *uint64 `json:"wr_id,omitempty"`
	Status  string  `json:"status,omitempty"` // cqe: the ibv_wc_status name; command: the model's status
	ByteLen uint32  `json:"byte_len,omitempty"`
	Recv    bool    `json:"recv,omitempty"` // cqe: a receive completion
	// State changes (state).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Async events (async): the event's name; Handle is its CQ, SRQ or port.
	Async  string `json:"async,omitempty"`
	Handle uint32 `json:"handle,omitempty"`
}

// Tracer receives a device's trace events. Trace is called with the
// device's lock held, in the order the device acts: it must not block or
// call the device (queue the event, drop it when full).
type Tracer interface {
	Trace(ev *TraceEvent)
}
