// Package ud models the IBTA Unreliable Datagram transport service of a
// queue pair, UD QPs and the GSI QP (QP1): one SEND_ONLY datagram per
// send request, Q_Key checks on receive, and the GRH area at the start of
// every receive buffer.
//
// A QP holds the UD state of one queue pair and reaches its device through
// a transport.Env; the work requests, completions and paths it exchanges
// are those of package transport.
package ud

import (
	"log/slog"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// DefaultMTU is the largest UD payload when Config.MTU is zero: the
// active MTU of a port on a 1500-byte Ethernet.
const DefaultMTU = 1024

// GRHSize is the GRH area at the start of every UD receive buffer.
const GRHSize = 40

// Config is the part of a UD or GSI QP's attributes the transport uses.
type Config struct {
	QPN  uint32
	QKey uint32
	GSI  bool // the GSI QP: always the well-known Q_Key
	// MTU is the largest payload of a datagram: the port's active MTU in
	// bytes (0: DefaultMTU).
	MTU uint32
}

// QP is the Unreliable Datagram transport of one UD or GSI QP.
type QP struct {
	env   transport.Env
	mem   mr.Space
	log   *slog.Logger
	cfg   Config
	state transport.State
	psn   uint32 // PSN of the next datagram
}

// New makes the UD transport of a QP in RESET.
func New(env transport.Env, mem mr.Space, log *slog.Logger) *QP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &QP{env: env, mem: mem, log: log}
}

// Configure takes the QP's current attributes.
func (qp *QP) Configure(cfg Config) { qp.cfg = cfg }

// SetState moves the transport with its QP (RESET restarts the PSNs).
func (qp *QP) SetState(next transport.State) {
	qp.state = next
	if next == transport.StateReset {
		qp.psn = 0
	}
}

// Send transmits one send request as a single SEND_ONLY datagram and
// completes it locally.
func (qp *QP) Send(wr *transport.SendWR) {
	if wr.Opcode == transport.OpNop && wr.Status == transport.StatusSuccess {
		qp.env.Complete(transport.Completion{WRID: wr.ID, Opcode: transport.WCSend, Signaled: wr.Signaled})
		return
	}
	if wr.Opcode != transport.OpSend && wr.Opcode != transport.OpSendImm {
		qp.fail(wr, transport.StatusLocQPOpErr, transport.EventQPRequestErr)
		return
	}
	if wr.Status != transport.StatusSuccess {
		qp.fail(wr, wr.Status, transport.EventQPAccessError)
		return
	}
	qkey := wr.QKey
	if qkey&0x80000000 != 0 {
		qkey = qp.cfg.QKey
	}
	if qp.cfg.GSI {
		qkey = roce.GSIQKey
	}
	path, ok := qp.env.PathTo(&wr.AH)
	if !ok || wr.DestQPN > roce.Mask24 {
		qp.fail(wr, transport.StatusLocQPOpErr, transport.EventQPRequestErr)
		return
	}
	mtu := qp.cfg.MTU
	if mtu == 0 {
		mtu = DefaultMTU
	}
	if wr.Length > mtu {
		// IBTA C10-93.1.1, as rxe: complete without sending.
		qp.complete(wr, transport.StatusSuccess, wr.Length)
		return
	}
	f := roce.PacketFields{}
	f.BTH.Opcode = roce.UDSendOnly
	if wr.Opcode == transport.OpSendImm {
		f.BTH.Opcode = roce.UDSendOnlyWithImmediate
		f.ImmDt = wr.Imm
	}
	f.BTH.SE = wr.Solicited
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = wr.DestQPN
	f.BTH.PSN = qp.psn
	qp.psn = roce.PSNAdd(qp.psn, 1)
	f.DETH.QKey = qkey
	f.DETH.SrcQP = qp.cfg.QPN
	err := qp.env.Transmit(path, f, transport.Payload{Len: int(wr.Length), Segs: wr.Segs})
	if err != nil {
		qp.log.Debug("UD send failed", "err", err)
		qp.fail(wr, transport.StatusLocProtErr, transport.EventQPAccessError)
		return
	}
	qp.complete(wr, transport.StatusSuccess, wr.Length)
}

func (qp *QP) complete(wr *transport.SendWR, status transport.Status, byteLen uint32) {
	qp.env.Complete(transport.Completion{WRID: wr.ID, Status: status, Opcode: wr.Opcode.Completion(), ByteLen: byteLen, Signaled: wr.Signaled})
}

// fail completes wr with an error and moves the QP to ERR.
func (qp *QP) fail(wr *transport.SendWR, status transport.Status, ev transport.Event) {
	qp.complete(wr, status, 0)
	qp.env.Error(ev)
}

// Receive delivers a datagram into the QP's next receive request: the GRH
// area (ipHeader, the received IP header or IB GRH; none, nil, on an IB
// packet without a GRH: the area is skipped and the completion says no
// GRH), then the payload. It returns
// false for a Q_Key violation (the datagram is dropped; the device counts
// it).
func (qp *QP) Receive(pkt *roce.Packet, ipHeader []byte) bool {
	if !transport.Receives(qp.state) {
		return true
	}
	if pkt.DETH.QKey() != qp.cfg.QKey {
		return false
	}
	recv, status, ok := qp.env.PeekRecv()
	if !ok {
		return true // no receive request: dropped
	}
	if status != transport.StatusSuccess {
		qp.env.PopRecv()
		qp.env.Complete(transport.Completion{Recv: true, WRID: recv.ID, Opcode: transport.WCRecv, Status: status})
		qp.env.Error(transport.EventQPAccessError)
		return true
	}
	payload := pkt.Payload
	need := uint64(GRHSize) + uint64(len(payload))
	if need > uint64(recv.Cap) {
		return true // does not fit: dropped, request kept
	}
	var grh [GRHSize]byte
	hdrType := uint8(2)
	switch len(ipHeader) {
	case 0:
		hdrType = 0 // an IB packet without a GRH: the area is left as it was
	case 20:
		copy(grh[20:], ipHeader)
		hdrType = 1
	default:
		copy(grh[:], ipHeader)
	}
	if hdrType != 0 {
		if err := qp.mem.Copy(recv.Segs, 0, grh[:], true); err != nil {
			return true
		}
	}
	if err := qp.mem.Copy(recv.Segs, GRHSize, payload, true); err != nil {
		return true
	}
	qp.env.PopRecv()
	c := transport.Completion{Recv: true, WRID: recv.ID, Opcode: transport.WCRecv, ByteLen: uint32(need),
		SrcQP: pkt.DETH.SrcQP(), GRH: hdrType != 0, NetworkHdrType: hdrType, Solicited: pkt.BTH.SE()}
	if pkt.ImmDt != nil {
		copy(c.Imm[:], pkt.ImmDt)
		c.HasImm = true
	}
	qp.env.Complete(c)
	return true
}
