// Package uc models the IBTA Unreliable Connected transport service of a
// queue pair (IBTA 9.8.3): SEND, SEND with immediate, RDMA WRITE and RDMA
// WRITE with immediate messages segmented FIRST/MIDDLE/LAST/ONLY by the
// path MTU, with PSNs and no acknowledgements. The requester completes a
// request when its last packet is on the wire; the responder tracks the
// expected PSN and silently drops the message in progress at a PSN gap or
// an opcode out of sequence (its receive request stays posted for the
// next message), and drops an RDMA WRITE whose R_Key, range or access the
// first packet fails.
//
// A QP holds the UC state of one queue pair and reaches its device through
// a transport.Env; the work requests, completions and paths it exchanges
// are those of package transport.
package uc

import (
	"cmp"
	"errors"
	"log/slog"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

const (
	// maxMessage bounds a UC message (an RDMA WRITE's DMA length).
	maxMessage = 1 << 31
	// pumpPackets bounds the packets and requests one Pump takes on.
	pumpPackets = 512
)

// Config is the part of a UC QP's attributes the transport uses; the
// device fills it from its own attribute format on every modification.
type Config struct {
	PD           uint32 // protection domain of the QP's memory regions
	DestQPN      uint32
	PMTU         int // path MTU in bytes
	SQPSN, RQPSN uint32
	Access       uint32 // remote access flags (mr.RemoteWrite only applies)
}

// Stats are the transport's counts of what it met; RESET keeps them.
type Stats struct {
	Dropped       uint64 // packets dropped (out of sequence, refused, no receive request)
	MessagesLost  uint64 // messages in progress abandoned at a gap
	OutOfSequence uint64 // packets whose PSN was not the expected one
}

// QP is the UC transport state of one queue pair: requester and responder.
type QP struct {
	cfg   Config
	state transport.State
	env   transport.Env // the device
	mem   mr.Space      // its memory, through the regions
	log   *slog.Logger

	// Requester: the request being sent (one at a time: nothing waits
	// for an acknowledgement).
	cur     transport.SendWR
	busy    bool   // cur is taken and not completed
	next    uint32 // its next packet
	npkt    uint32 // its packets
	nextPSN uint32

	// Responder.
	ePSN    uint32
	inSend  bool
	inWrite bool
	// recv is the receive request the QP took off its queue for a
	// message (hasRecv): the SEND in progress, or one whose message was
	// lost, kept for the next message.
	recv     transport.RecvWR
	hasRecv  bool
	recvOff  uint64
	writeRef mr.Ref
	writeVA  uint64
	writeRem uint64
	writeLen uint32

	stats Stats
}

// New makes the UC transport of a QP in RESET.
func New(env transport.Env, mem mr.Space, log *slog.Logger) *QP {
	return &QP{env: env, mem: mem, log: cmp.Or(log, slog.New(slog.DiscardHandler))}
}

// Configure takes the QP's current attributes.
func (qp *QP) Configure(cfg Config) { qp.cfg = cfg }

// State is the QP state the transport was last told.
func (qp *QP) State() transport.State { return qp.state }

// Stats returns the transport's counts.
func (qp *QP) Stats() Stats { return qp.stats }

// ExpectedPSN is the PSN the responder expects next.
func (qp *QP) ExpectedPSN() uint32 { return qp.ePSN }

// SetState moves the transport with its QP: RTR latches the expected PSN,
// RTS the send PSN, RESET forgets everything, ERR flushes the request
// being sent.
func (qp *QP) SetState(next transport.State) {
	prev := qp.state
	qp.state = next
	switch {
	case next == transport.StateReset:
		qp.Reset()
	case next == transport.StateErr:
		qp.Flush()
		qp.inSend, qp.inWrite = false, false
	case next == transport.StateRTR && prev != next:
		qp.ePSN = qp.cfg.RQPSN & roce.Mask24
	case next == transport.StateRTS && prev == transport.StateRTR:
		qp.nextPSN = qp.cfg.SQPSN & roce.Mask24
	}
}

// Reset clears the transport state (QP to RESET, or destroyed).
func (qp *QP) Reset() {
	*qp = QP{env: qp.env, mem: qp.mem, log: qp.log, cfg: qp.cfg, state: qp.state, stats: qp.stats,
		cur: transport.SendWR{Segs: qp.cur.Segs[:0]}}
}

// --- Requester ----------------------------------------------------------------

// Pump takes posted requests and sends their packets, completing each
// when its last packet is on the wire (a send doorbell, or a kick after
// the receiver was busy). A request UC cannot carry (READ, atomics, SEND
// with invalidate) or one the device found bad completes in error and
// moves the QP to ERR.
func (qp *QP) Pump() {
	budget := pumpPackets
	for transport.Sends(qp.state) {
		if budget <= 0 {
			// A long message or a queue kept full: the rest on the
			// engine's next turn, after the device's other work.
			qp.env.Kick(transport.WorkSend, false)
			break
		}
		if !qp.busy {
			budget-- // each request counts, with or without packets
			if qp.state != transport.StateRTS || !qp.take() {
				break
			}
			continue
		}
		path, ok := qp.env.Path()
		if !ok {
			break
		}
		for ; qp.next < qp.npkt && budget > 0; budget-- {
			if err := qp.sendPacket(path); err != nil {
				if errors.Is(err, transport.ErrPeerBusy) {
					qp.env.Kick(transport.WorkSend, true)
					qp.env.Publish()
					return
				}
				qp.fail(transport.StatusLocProtErr)
				return
			}
			qp.next++
		}
		if qp.next < qp.npkt {
			continue // out of budget
		}
		qp.busy = false
		qp.completeSend(transport.StatusSuccess, qp.cur.Length)
	}
	qp.env.Publish()
}

// take takes the next posted request into cur; false: none (or the send
// queue is unreadable, or the request failed and the QP is in ERR).
func (qp *QP) take() bool {
	n, ok := qp.env.PendingSends()
	if !ok || n == 0 {
		return false
	}
	qp.cur = transport.SendWR{Segs: qp.cur.Segs[:0]}
	if !qp.env.TakeSend(&qp.cur) {
		return false
	}
	qp.busy = true
	if qp.cur.Status != transport.StatusSuccess {
		qp.fail(qp.cur.Status)
		return false
	}
	pmtu := uint32(max(qp.cfg.PMTU, roce.MinPMTU))
	switch qp.cur.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpWrite, transport.OpWriteImm:
		if uint64(qp.cur.Length) > maxMessage {
			qp.fail(transport.StatusLocLenErr)
			return false
		}
		qp.npkt = max(1, (qp.cur.Length+pmtu-1)/pmtu)
		qp.next = 0
	case transport.OpNop:
		qp.busy = false
		qp.completeSend(transport.StatusSuccess, 0)
	case transport.OpLocalInv, transport.OpFastReg:
		st := qp.env.LocalOp(&qp.cur)
		if st != transport.StatusSuccess {
			qp.fail(st)
			return false
		}
		qp.busy = false
		qp.completeSend(transport.StatusSuccess, 0)
	default:
		qp.fail(transport.StatusLocQPOpErr)
		return false
	}
	return true
}

// fail completes cur with status and moves the QP to ERR.
func (qp *QP) fail(status transport.Status) {
	qp.busy = false
	qp.completeSend(status, 0)
	ev := transport.EventQPRequestErr
	if status == transport.StatusLocProtErr {
		ev = transport.EventQPAccessError
	}
	qp.env.Error(ev)
}

func (qp *QP) completeSend(status transport.Status, n uint32) {
	wr := &qp.cur
	qp.env.Complete(transport.Completion{WRID: wr.ID, Status: status, Opcode: wr.Opcode.Completion(),
		ByteLen: n, Signaled: wr.Signaled})
}

// sendPacket sends packet qp.next of cur.
func (qp *QP) sendPacket(path transport.Path) error {
	wr := &qp.cur
	pmtu := uint32(max(qp.cfg.PMTU, roce.MinPMTU))
	i := qp.next
	var f roce.PacketFields
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = qp.cfg.DestQPN & roce.Mask24
	f.BTH.PSN = roce.PSNAdd(qp.nextPSN, int(i))
	pos := transport.Position(i, qp.npkt)
	last := pos >= 2
	off := i * pmtu
	n := min(pmtu, wr.Length-min(off, wr.Length))
	imm := 0
	if wr.Opcode == transport.OpSendImm || wr.Opcode == transport.OpWriteImm {
		imm = 1
	}
	if wr.Opcode == transport.OpSend || wr.Opcode == transport.OpSendImm {
		f.BTH.Opcode = transport.SendOpcodes[pos][imm].UC()
	} else {
		f.BTH.Opcode = transport.WriteOpcodes[pos][imm].UC()
		if i == 0 {
			f.RETH = roce.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: wr.Length}
		}
	}
	if last {
		f.ImmDt = wr.Imm
		f.BTH.SE = wr.Solicited
	}
	payload := transport.Payload{Len: int(n)}
	if n > 0 {
		payload.Segs, payload.Off = wr.Segs, uint64(off)
	}
	if err := qp.env.Transmit(path, f, payload); err != nil {
		return err
	}
	if last {
		qp.nextPSN = roce.PSNAdd(qp.nextPSN, int(qp.npkt))
	}
	return nil
}

// --- Responder ----------------------------------------------------------------

func isSend(op roce.Opcode) bool { return op >= roce.UCSendFirst && op <= roce.UCSendOnlyWithImmediate }

func isWrite(op roce.Opcode) bool {
	return op >= roce.UCRDMAWriteFirst && op <= roce.UCRDMAWriteOnlyWithImmediate
}

// Receive handles a UC packet for this QP whose addresses the caller has
// checked. A packet at an unexpected PSN abandons the message in progress
// (the expected PSN follows the packet: UC has no retransmission to wait
// for); a FIRST or ONLY packet then starts a new message, a MIDDLE or
// LAST is dropped. It reports whether the packet was taken.
func (qp *QP) Receive(pkt *roce.Packet) bool {
	if !transport.Receives(qp.state) || pkt.BTH == nil {
		return false
	}
	op := pkt.Opcode()
	info, _ := op.Info()
	if !isSend(op) && !isWrite(op) {
		qp.stats.Dropped++
		return false
	}
	psn := pkt.BTH.PSN()
	if psn != qp.ePSN {
		qp.stats.OutOfSequence++
		qp.abandon()
	}
	qp.ePSN = roce.PSNAdd(psn, 1)
	first := info.Pos == roce.PosFirst || info.Pos == roce.PosOnly
	last := info.Pos == roce.PosLast || info.Pos == roce.PosOnly
	if first && (qp.inSend || qp.inWrite) {
		// The last packets of the message in progress were lost.
		qp.abandon()
	}
	switch {
	case isSend(op) && qp.inSend != first && !qp.inWrite,
		isWrite(op) && qp.inWrite != first && !qp.inSend:
	default:
		qp.stats.Dropped++ // out of sequence: waits for a FIRST or ONLY
		return false
	}
	if roce.CheckPayloadLen(op, len(pkt.Payload), qp.cfg.PMTU) != nil {
		qp.abandon()
		qp.stats.Dropped++
		return false
	}
	if isSend(op) {
		return qp.send(pkt, first, last)
	}
	return qp.write(pkt, op, first, last)
}

// abandon drops the message in progress; its receive request, if it has
// one, stays the QP's for the next message (IBTA 9.8.3: a lost UC message
// consumes no receive WQE).
func (qp *QP) abandon() {
	if qp.inSend || qp.inWrite {
		qp.stats.MessagesLost++
	}
	qp.inSend, qp.inWrite = false, false
}

// takeRecv makes sure the QP holds the receive request the next message
// consumes: the one it holds, or the next posted one, taken off the queue
// (at once: a queue an SRQ shares with other QPs moves on). false: none
// (the message is dropped) or a bad one (completed in error, QP to ERR).
func (qp *QP) takeRecv() bool {
	if qp.hasRecv {
		return true
	}
	recv, status, ok := qp.env.PeekRecv()
	if !ok {
		qp.stats.Dropped++
		return false
	}
	qp.env.PopRecv()
	if status != transport.StatusSuccess {
		qp.completeRecv(transport.Completion{WRID: recv.ID, Opcode: transport.WCRecv, Status: transport.StatusLocQPOpErr})
		qp.env.Error(transport.EventQPFatal)
		return false
	}
	qp.recv, qp.hasRecv = recv, true
	return true
}

// done completes the receive request the QP holds with c.
func (qp *QP) done(c transport.Completion) {
	c.WRID, qp.hasRecv = qp.recv.ID, false
	qp.completeRecv(c)
}

func (qp *QP) completeRecv(c transport.Completion) {
	c.Recv = true
	c.SrcQP = qp.cfg.DestQPN
	qp.env.Complete(c)
}

// send places a SEND packet in the receive request peeked at its FIRST
// packet; the LAST consumes and completes it.
func (qp *QP) send(pkt *roce.Packet, first, last bool) bool {
	if first {
		if !qp.takeRecv() {
			return false
		}
		qp.recvOff, qp.inSend = 0, true
	}
	payload := pkt.Payload
	status, ev := transport.StatusSuccess, transport.Event(0)
	if qp.recvOff+uint64(len(payload)) > uint64(qp.recv.Cap) {
		status, ev = transport.StatusLocLenErr, transport.EventQPRequestErr // larger than the receive buffers
	} else if err := qp.mem.Copy(qp.recv.Segs, qp.recvOff, payload, true); err != nil {
		status, ev = transport.StatusLocProtErr, transport.EventQPAccessError
	}
	if status != transport.StatusSuccess {
		// The receive request completes in error and the QP goes to ERR.
		qp.abandon()
		qp.done(transport.Completion{Opcode: transport.WCRecv, Status: status})
		qp.env.Error(ev)
		return false
	}
	qp.recvOff += uint64(len(payload))
	if !last {
		return true
	}
	qp.inSend = false
	qp.done(transport.Completion{Opcode: transport.WCRecv, ByteLen: uint32(qp.recvOff), Solicited: pkt.BTH.SE(),
		HasImm: pkt.ImmDt != nil, Imm: imm(pkt.ImmDt)})
	return true
}

// write writes an RDMA WRITE packet: the FIRST checks the RETH (length,
// R_Key, PD, range, remote write access) and keeps a reference to the
// region; a refused FIRST drops the message. A LAST with immediate data
// consumes a receive request (none: the completion is lost).
func (qp *QP) write(pkt *roce.Packet, op roce.Opcode, first, last bool) bool {
	payload := pkt.Payload
	if first {
		reth := pkt.RETH
		va, key, n := reth.VA(), reth.RKey(), uint64(reth.DMALength())
		if n > maxMessage || qp.cfg.Access&mr.RemoteWrite == 0 {
			qp.stats.Dropped++
			return false
		}
		var ref mr.Ref
		if n > 0 {
			var ok bool
			if ref, ok = qp.mem.Remote(qp.cfg.PD, key, va, n, mr.RemoteWrite); !ok {
				qp.stats.Dropped++
				return false
			}
		}
		qp.writeRef, qp.writeVA, qp.writeRem, qp.writeLen, qp.inWrite = ref, va, n, uint32(n), true
	}
	n := uint64(len(payload))
	if n > qp.writeRem || (!last && n != uint64(qp.cfg.PMTU)) || (last && n != qp.writeRem) {
		qp.abandon()
		qp.stats.Dropped++
		return false
	}
	if n > 0 {
		if err := qp.mem.Write(qp.writeRef, qp.writeVA, payload); err != nil {
			qp.abandon()
			qp.stats.Dropped++
			return false
		}
	}
	qp.writeVA += n
	qp.writeRem -= n
	if !last {
		return true
	}
	qp.inWrite = false
	if op != roce.UCRDMAWriteLastWithImmediate && op != roce.UCRDMAWriteOnlyWithImmediate {
		return true
	}
	if qp.takeRecv() {
		qp.done(transport.Completion{Opcode: transport.WCRecvWriteImm, ByteLen: qp.writeLen,
			HasImm: true, Imm: imm(pkt.ImmDt), Solicited: pkt.BTH.SE()})
		return true
	}
	return false
}

// Flush completes the request being sent and the receive request the QP
// holds with WR_FLUSH_ERR (the QP in ERR; the device flushes its queues
// itself).
func (qp *QP) Flush() {
	if qp.busy {
		qp.busy = false
		qp.completeSend(transport.StatusWRFlushErr, 0)
	}
	if qp.hasRecv {
		qp.done(transport.Completion{Opcode: transport.WCRecv, Status: transport.StatusWRFlushErr})
	}
}

// imm is a packet's immediate data (zero when it has none).
func imm(b roce.ImmDt) (v [4]byte) {
	copy(v[:], b)
	return v
}
