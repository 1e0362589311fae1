package rc

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The requester: posted requests taken from the send queue, segmented
// into packets with PSNs, sent in a window, retransmitted go-back-N on a
// timeout or a sequence NAK, waited out on an RNR NAK, completed by
// cumulative ACKs, READ responses and atomic acknowledges.

// take moves posted requests from the send queue into the requester (at
// most one queue's worth in flight) and assigns their PSNs.
func (qp *QP) take() {
	n, ok := qp.env.PendingSends()
	if !ok {
		return
	}
	for ; n > 0 && uint32(len(qp.reqs)) < qp.cfg.SQDepth; n-- {
		var req *request
		if last := len(qp.spare) - 1; last >= 0 {
			req, qp.spare = qp.spare[last], qp.spare[:last]
		} else {
			req = new(request) // only when no finished one is spare
		}
		// (A spare request is kept zero but for its Segs storage, as
		// TakeSend wants it.)
		if !qp.env.TakeSend(&req.wr) {
			*req = request{wr: transport.SendWR{Segs: req.wr.Segs[:0]}}
			qp.spare = append(qp.spare, req)
			return
		}
		req.status, req.length = req.wr.Status, req.wr.Length
		if req.status == transport.StatusSuccess {
			qp.prepare(req)
		}
		if len(qp.reqs) == cap(qp.reqs) {
			qp.compactReqs()
		}
		qp.reqs = append(qp.reqs, req)
	}
}

// prepare checks a request's opcode and assigns its PSNs.
func (qp *QP) prepare(req *request) {
	pmtu := uint32(qp.cfg.PMTU)
	switch req.wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv, transport.OpWrite, transport.OpWriteImm:
		req.npsn = max(1, (req.length+pmtu-1)/pmtu)
	case transport.OpRead:
		req.npsn = max(1, (req.length+pmtu-1)/pmtu)
		req.readOrAtomic = true
	case transport.OpCompSwap, transport.OpFetchAdd:
		if req.length < 8 {
			req.status = transport.StatusLocLenErr
		}
		req.length = 8
		req.npsn = 1
		req.readOrAtomic = true
	case transport.OpLocalInv, transport.OpFastReg, transport.OpNop:
		req.local = true
	default:
		req.status = transport.StatusLocQPOpErr
	}
	if req.status != transport.StatusSuccess || req.local {
		req.npsn = 0
		return
	}
	req.first = qp.nextPSN
	qp.nextPSN = roce.PSNAdd(qp.nextPSN, int(req.npsn))
}

// Pump takes new requests, sends what the window allows, and completes
// what is done, in order (a send doorbell, or the timer).
func (qp *QP) Pump() {
	if !transport.Sends(qp.state) {
		return
	}
	if qp.state == transport.StateRTS {
		qp.take()
	}
	qp.complete()
	if qp.state == transport.StateErr || qp.rnrWait {
		return
	}
	path, ok := qp.env.Path()
	if !ok {
		return
	}
	readsOut := 0
	maxReads := max(1, int(qp.cfg.MaxRdAtomic))
	runs := true // the wire may carry runs; false once it said no
	for _, req := range qp.reqs {
		if req.done || req.local || req.npsn == 0 {
			if req.status != transport.StatusSuccess || req.local {
				break // waits for the requests before it
			}
			continue
		}
		if req.readOrAtomic {
			if req.next == 0 && readsOut >= maxReads {
				break
			}
			readsOut++
		}
		if req.wr.Fence && req.next == 0 && readsOut > 0 && !req.readOrAtomic {
			break
		}
		for req.next < req.packets() {
			psn := roce.PSNAdd(req.first, int(req.next))
			if roce.PSNDiff(psn, qp.unacked) >= rcWindow && roce.PSNDiff(psn, qp.unacked) > 0 {
				return
			}
			if n := qp.runLength(req, psn); runs && n > 1 {
				taken, err := qp.sendRun(path, req, n)
				if err != nil {
					if errors.Is(err, transport.ErrPeerBusy) {
						qp.env.Kick(transport.WorkSend, true)
						return
					}
					qp.failRequest(req, transport.StatusLocProtErr)
					return
				}
				if taken > 0 {
					req.next += uint32(taken)
					qp.sent(req)
					qp.armTimer(false)
					continue
				}
				runs = false
			}
			if err := qp.sendPacket(path, req); err != nil {
				if errors.Is(err, transport.ErrPeerBusy) {
					qp.env.Kick(transport.WorkSend, true)
					return
				}
				qp.failRequest(req, transport.StatusLocProtErr)
				return
			}
			req.next++
			qp.sent(req)
			qp.armTimer(false)
		}
	}
}

// fields starts the fields of a packet to the QP's peer.
func (qp *QP) fields(op roce.Opcode, psn uint32) roce.PacketFields {
	f := roce.PacketFields{}
	f.BTH.Opcode = op
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = qp.cfg.DestQPN
	f.BTH.PSN = psn
	return f
}

// sendPacket sends packet req.next of request req.
func (qp *QP) sendPacket(path transport.Path, req *request) error {
	wr := &req.wr
	pmtu := uint32(qp.cfg.PMTU)
	i := req.next
	f := qp.fields(0, roce.PSNAdd(req.first, int(i)))
	f.XRCETH = wr.XRCSRQN & roce.Mask24
	var n, off uint32
	pos := transport.Position(i, req.npsn)
	last := pos >= 2
	switch wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv:
		off = i * pmtu
		n = min(pmtu, req.length-off)
		imm := 0
		if wr.Opcode == transport.OpSendImm {
			imm = 1
		}
		f.BTH.Opcode = transport.SendOpcodes[pos][imm]
		if last {
			if wr.Opcode == transport.OpSendImm {
				f.ImmDt = wr.Imm
			}
			if wr.Opcode == transport.OpSendInv {
				f.BTH.Opcode = roce.RCSendLastWithInvalidate
				if pos == 3 {
					f.BTH.Opcode = roce.RCSendOnlyWithInvalidate
				}
				f.IETH = wr.InvalidateKey
			}
			f.BTH.SE = wr.Solicited
		}
	case transport.OpWrite, transport.OpWriteImm:
		off = i * pmtu
		n = min(pmtu, req.length-off)
		imm := 0
		if wr.Opcode == transport.OpWriteImm {
			imm = 1
		}
		f.BTH.Opcode = transport.WriteOpcodes[pos][imm]
		if i == 0 {
			f.RETH = roce.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: req.length}
		}
		if last && imm == 1 {
			f.ImmDt = wr.Imm
			f.BTH.SE = wr.Solicited
		}
	case transport.OpRead:
		done := min(req.resp*pmtu, req.length) // bytes already placed (a re-request)
		f.BTH.Opcode = roce.RCRDMAReadRequest
		f.BTH.PSN = roce.PSNAdd(req.first, int(req.resp))
		f.RETH = roce.RETHFields{VA: wr.RemoteAddr + uint64(done), RKey: wr.RKey, DMALength: req.length - done}
		last = true
	case transport.OpCompSwap, transport.OpFetchAdd:
		f.BTH.Opcode = roce.RCCompareSwap
		f.AtomicETH = roce.AtomicETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		if wr.Opcode == transport.OpFetchAdd {
			f.BTH.Opcode = roce.RCFetchAdd
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = wr.CompareAdd, 0
		}
		last = true
	}
	qp.sinceAck++
	if last || qp.sinceAck >= rcAckEvery {
		f.BTH.AckReq = true
		qp.sinceAck = 0
	}
	payload := transport.Payload{Len: int(n)}
	if n > 0 {
		payload.Segs, payload.Off = wr.Segs, uint64(off)
	}
	return qp.transmit(path, f, payload)
}

// runLength is how many packets from req.next on (PSN psn) could go as one
// run (Env.TransmitRun): the full-PMTU MIDDLE packets of a SEND or WRITE
// that follow, as many as the window lets out.
func (qp *QP) runLength(req *request, psn uint32) uint32 {
	switch req.wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv, transport.OpWrite, transport.OpWriteImm:
	default:
		return 0
	}
	if req.next == 0 || req.next+1 >= req.npsn {
		return 0 // the first and the last packet go alone
	}
	n := req.npsn - 1 - req.next
	if room := rcWindow - int(roce.PSNDiff(psn, qp.unacked)); room < int(n) {
		n = uint32(max(room, 0))
	}
	return n
}

// sendRun offers packets req.next .. req.next+n-1, all full-PMTU MIDDLE
// packets, to the wire as one run; it returns how many were taken (0: the
// wire takes no runs now).
func (qp *QP) sendRun(path transport.Path, req *request, n uint32) (int, error) {
	wr := &req.wr
	pmtu := uint32(qp.cfg.PMTU)
	f := qp.fields(transport.SendOpcodes[1][0], roce.PSNAdd(req.first, int(req.next)))
	f.XRCETH = wr.XRCSRQN & roce.Mask24
	if wr.Opcode == transport.OpWrite || wr.Opcode == transport.OpWriteImm {
		f.BTH.Opcode = transport.WriteOpcodes[1][0]
	}
	ackReq := qp.sinceAck+int(n) >= rcAckEvery
	f.BTH.AckReq = ackReq
	payload := transport.Payload{Len: int(n * pmtu), Segs: wr.Segs, Off: uint64(req.next * pmtu)}
	taken, err := qp.transmitRun(path, f, payload, int(n))
	if err != nil || taken <= 0 {
		return 0, err
	}
	taken = min(taken, int(n))
	if ackReq {
		qp.sinceAck = 0
	} else {
		qp.sinceAck += taken
	}
	return taken, nil
}

// sent records that the packet before req.next went out: the PSNs up to
// it (a READ's whole response range) may now be acknowledged.
func (qp *QP) sent(req *request) {
	end := roce.PSNAdd(req.first, int(req.next))
	if req.readOrAtomic {
		end = roce.PSNAdd(req.last(), 1)
	}
	if roce.PSNDiff(end, qp.sentEnd) > 0 {
		qp.sentEnd = end
	}
}

// beyondSent reports whether psn is newer than every PSN sent: no genuine
// response can carry it (rocev2.md §3.5: a response that fits no
// outstanding request is dropped).
func (qp *QP) beyondSent(psn uint32) bool { return roce.PSNDiff(psn, qp.sentEnd) >= 0 }

// nakable reports whether a NAK's PSN names a request packet still
// awaiting its acknowledgement: sent, and not older than the oldest
// unacknowledged PSN, or inside the oldest unfinished request (a READ or
// atomic an ACK went past is re-requested at its own PSN).
func (qp *QP) nakable(psn uint32) bool {
	if qp.beyondSent(psn) {
		return false
	}
	if roce.PSNDiff(psn, qp.unacked) >= 0 {
		return true
	}
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		return roce.PSNInRange(psn, req.first, req.last())
	}
	return false
}

// armTimer starts the retransmission timer if it is not running (or
// restarts it when progress was made).
func (qp *QP) armTimer(restart bool) {
	timeout := roce.LocalACKTimeout(qp.cfg.Timeout)
	if timeout == 0 {
		return
	}
	if qp.timerArmed && !restart {
		return
	}
	qp.startTimer(timeout)
}

func (qp *QP) startTimer(d time.Duration) {
	qp.env.ArmTimer(d)
	qp.timerArmed = true
}

func (qp *QP) stopTimer() {
	qp.env.StopTimer()
	qp.timerArmed = false
}

// Timeout handles an expired timer: the end of an RNR wait, or a
// retransmission timeout.
func (qp *QP) Timeout() {
	if !qp.timerArmed {
		return
	}
	qp.timerArmed = false
	if !transport.Sends(qp.state) {
		return
	}
	if qp.rnrWait {
		qp.rnrWait = false
		qp.rewind(qp.unacked)
		qp.Pump()
		return
	}
	if !qp.outstanding() {
		return
	}
	qp.stats.Timeouts++
	if qp.retries == 0 {
		qp.failHead(transport.StatusRetryExc)
		return
	}
	qp.retries--
	qp.log.Debug("RC retransmission timeout", "psn", qp.unacked, "retries_left", qp.retries)
	qp.rewind(qp.unacked)
	qp.Pump()
}

// outstanding reports whether packets await acknowledgement.
func (qp *QP) outstanding() bool {
	for _, req := range qp.reqs {
		if !req.done && req.npsn > 0 && req.next > 0 {
			return true
		}
	}
	return false
}

// rewind goes back to PSN from: every unfinished request at or after it is
// resent from there (READ and atomic requests whole).
func (qp *QP) rewind(from uint32) {
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if req.readOrAtomic {
			// Re-request: an atomic whole (the responder replays its saved
			// result), a READ from its first missing response on, so a
			// lossy link cannot keep a long READ from ever finishing.
			req.next = 0
			if req.wr.Opcode != transport.OpRead {
				req.resp = 0
			}
			continue
		}
		if roce.PSNDiff(from, req.first) <= 0 {
			req.next = 0
		} else if roce.PSNDiff(from, req.last()) <= 0 {
			req.next = uint32(roce.PSNDiff(from, req.first))
		}
	}
	qp.sinceAck = 0
}

// acked handles a cumulative acknowledgement of every PSN up to psn.
func (qp *QP) acked(psn uint32, progress bool) {
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if roce.PSNDiff(req.last(), psn) > 0 {
			break
		}
		if req.readOrAtomic {
			// Acknowledged past a READ/atomic whose response never came:
			// it was lost; retry it.
			if req.next > 0 {
				qp.rewind(req.first)
			}
			break
		}
		req.done = true
	}
	if roce.PSNDiff(psn, qp.unacked) >= 0 {
		qp.unacked = roce.PSNAdd(psn, 1)
		progress = true
	}
	if progress {
		qp.retries = qp.cfg.RetryCnt
		qp.rnrRetries = qp.cfg.RNRRetry
	}
}

// complete posts completions for finished requests at the head, in order.
func (qp *QP) complete() {
	qp.completeReqs()
	// What take and completeReqs did, the guest sees now: before the
	// packets Pump sends next, not once they are all sent.
	qp.env.Publish()
}

// completeReqs completes the finished requests at the head of the queue.
func (qp *QP) completeReqs() {
	for len(qp.reqs) > 0 && qp.state != transport.StateErr {
		req := qp.reqs[0]
		switch {
		case req.status != transport.StatusSuccess:
			qp.failRequest(req, req.status)
			return
		case req.local && req.wr.Opcode == transport.OpNop:
			req.done = true
		case req.local:
			if status := qp.env.LocalOp(&req.wr); status != transport.StatusSuccess {
				qp.failRequest(req, status)
				return
			}
			req.done = true
		case !req.done:
			if !qp.outstanding() && !qp.rnrWait {
				// (An RNR wait keeps its timer: only its end resends.)
				qp.stopTimer()
			}
			return
		}
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&req.wr, transport.StatusSuccess, req.length)
		// Nothing refers to a completed request any more: take reuses it,
		// and the storage of its segment list.
		if uint32(len(qp.spare)) < qp.cfg.SQDepth {
			*req = request{wr: transport.SendWR{Segs: req.wr.Segs[:0]}}
			qp.spare = append(qp.spare, req)
		}
	}
	if len(qp.reqs) == 0 {
		qp.stopTimer()
		qp.rnrWait = false
		qp.env.Drained()
	}
}

// compactReqs moves the requests in flight to the front of their storage,
// which completed requests leave from the front: a steady stream reuses
// one array instead of appending into a new one whenever the old runs out.
func (qp *QP) compactReqs() {
	if cap(qp.reqStore) < 2*len(qp.reqs) {
		qp.reqStore = make([]*request, 0, max(2*len(qp.reqs), 16))
	}
	n := copy(qp.reqStore[:len(qp.reqs)], qp.reqs)
	clear(qp.reqStore[n:cap(qp.reqStore)])
	qp.reqs = qp.reqStore[:n]
}

// completeSend posts the send completion of wr.
func (qp *QP) completeSend(wr *transport.SendWR, status transport.Status, byteLen uint32) {
	qp.env.Complete(transport.Completion{WRID: wr.ID, Status: status, Opcode: wr.Opcode.Completion(),
		ByteLen: byteLen, Signaled: wr.Signaled})
}

// completeRecv posts a receive completion.
func (qp *QP) completeRecv(c transport.Completion) {
	c.Recv = true
	qp.env.Complete(c)
}

// failRequest completes the failed request req and moves the QP to ERR:
// the finished requests before it complete first, everything after it is
// flushed.
func (qp *QP) failRequest(req *request, status transport.Status) {
	for len(qp.reqs) > 0 && qp.reqs[0] != req && qp.reqs[0].done {
		head := qp.reqs[0]
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&head.wr, transport.StatusSuccess, head.length)
	}
	for i, held := range qp.reqs {
		if held == req {
			qp.reqs = qp.reqs[i+1:]
			break
		}
	}
	qp.completeSend(&req.wr, status, 0)
	ev := transport.EventQPRequestErr
	if status == transport.StatusLocProtErr || status == transport.StatusRemAccess {
		ev = transport.EventQPAccessError
	}
	qp.env.Error(ev)
}

// failHead fails the oldest request not done with status (retry and RNR
// retry exhaustion).
func (qp *QP) failHead(status transport.Status) {
	for _, req := range qp.reqs {
		if !req.done {
			qp.failRequest(req, status)
			return
		}
	}
}

// failAt fails the request whose PSN range holds psn (class-C NAKs,
// rocev2.md §3.5: "complete the WQE at that PSN"). The NAK acknowledged the
// requests before it (acked marked them done); a READ or atomic before it
// whose response never came cannot complete any more: it is flushed, as the
// QP goes to ERR. The caller checked that psn is outstanding (nakable);
// should no request hold it, the oldest unfinished one fails.
func (qp *QP) failAt(psn uint32, status transport.Status) {
	var target *request
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if target == nil {
			target = req // fallback: the oldest unfinished
		}
		if roce.PSNInRange(psn, req.first, req.last()) {
			target = req
			break
		}
	}
	if target == nil {
		return
	}
	for len(qp.reqs) > 0 && qp.reqs[0] != target {
		head := qp.reqs[0]
		if !head.done && !head.local && head.status == transport.StatusSuccess && head.npsn > 0 {
			qp.reqs = qp.reqs[1:]
			qp.completeSend(&head.wr, transport.StatusWRFlushErr, 0)
			continue
		}
		if !head.done {
			break
		}
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&head.wr, transport.StatusSuccess, head.length)
	}
	qp.failRequest(target, status)
}

// flush completes every request the requester holds, and the receive
// request of a SEND in progress, with WR_FLUSH_ERR.
func (qp *QP) flush() {
	reqs := qp.reqs
	qp.reqs = nil
	qp.stopTimer()
	for _, req := range reqs {
		qp.completeSend(&req.wr, transport.StatusWRFlushErr, 0)
	}
	if recv := qp.recv; recv != nil {
		qp.recv = nil
		qp.completeRecv(transport.Completion{WRID: recv.ID, Opcode: transport.WCRecv, Status: transport.StatusWRFlushErr})
	}
}

// response handles ACK, NAK, READ response and atomic acknowledge packets.
func (qp *QP) response(pkt *roce.Packet) {
	if !transport.Sends(qp.state) {
		return
	}
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	var syn roce.Syndrome
	if pkt.AETH != nil {
		syn = pkt.AETH.Syndrome()
	}
	if qp.beyondSent(psn) {
		// Acknowledges (or NAKs, or answers) a PSN never sent: forged or
		// from another connection. It must not complete anything.
		qp.log.Debug("RC response beyond the PSNs sent dropped", "psn", psn, "sent_end", qp.sentEnd)
		return
	}
	if (syn.IsRNRNAK() || syn.IsNAK()) && op == roce.RCAcknowledge && !qp.nakable(psn) {
		qp.log.Debug("RC NAK outside the outstanding window dropped", "psn", psn, "unacked", qp.unacked)
		return
	}
	switch op {
	case roce.RCAcknowledge:
		switch {
		case syn.IsACK():
			qp.acked(psn, false)
		case syn.IsRNRNAK():
			qp.acked(roce.PSNAdd(psn, -1), false)
			if qp.rnrRetries == 0 {
				qp.failHead(transport.StatusRNRRetryExc)
				return
			}
			if qp.rnrRetries != rcInfiniteRNR {
				qp.rnrRetries--
			}
			qp.unacked = psn
			qp.rnrWait = true
			qp.startTimer(roce.RNRTimer(syn.Code()))
			return
		case syn.IsNAK():
			qp.acked(roce.PSNAdd(psn, -1), false)
			switch roce.NAKCode(syn.Code()) {
			case roce.NAKPSNSequenceError:
				if qp.rnrWait {
					// The responder still expects the RNR-NAKed PSN and
					// NAKs what followed it: the wait's end resends from
					// there anyway. Acting now would resend into the RNR
					// condition and spend a retry on it.
					return
				}
				if qp.retries == 0 {
					qp.failHead(transport.StatusRetryExc)
					return
				}
				qp.retries--
				qp.unacked = psn
				qp.rewind(psn)
			case roce.NAKInvalidRequest, roce.NAKInvalidRDRequest:
				qp.failAt(psn, transport.StatusRemInvReq)
				return
			case roce.NAKRemoteAccessError:
				qp.failAt(psn, transport.StatusRemAccess)
				return
			default:
				qp.failAt(psn, transport.StatusRemOpErr)
				return
			}
		}
	case roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle, roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly:
		qp.readResponse(pkt)
	case roce.RCAtomicAcknowledge:
		for _, req := range qp.reqs {
			if req.done || req.npsn == 0 {
				continue
			}
			if !req.readOrAtomic || req.wr.Opcode == transport.OpRead || req.first != psn || req.next == 0 {
				break
			}
			var orig [8]byte
			binary.LittleEndian.PutUint64(orig[:], pkt.AtomicAckETH.OrigData())
			if err := qp.mem.Copy(req.wr.Segs, 0, orig[:], true); err != nil {
				qp.failRequest(req, transport.StatusLocProtErr)
				return
			}
			qp.acked(roce.PSNAdd(psn, -1), true)
			req.done = true
			qp.acked(psn, true)
			break
		}
	default:
		return
	}
	qp.afterProgress()
}

// afterProgress completes, re-arms the timer and sends more.
func (qp *QP) afterProgress() {
	qp.complete()
	if qp.state == transport.StateErr {
		return
	}
	if qp.outstanding() && !qp.rnrWait {
		qp.armTimer(true)
	}
	qp.Pump()
}

// readResponse places one READ response packet.
func (qp *QP) readResponse(pkt *roce.Packet) {
	psn := pkt.BTH.PSN()
	var req *request
	for _, held := range qp.reqs {
		if held.done || held.npsn == 0 {
			continue
		}
		if held.wr.Opcode == transport.OpRead && held.next > 0 && roce.PSNInRange(psn, held.first, held.last()) {
			req = held
		}
		break
	}
	if req == nil {
		return
	}
	if want := roce.PSNAdd(req.first, int(req.resp)); psn != want {
		// A response past a gap: the ones before it were lost. Ask again
		// from the first missing one at once (once per gap), as rxe does,
		// instead of waiting for the timer.
		if roce.PSNDiff(psn, want) > 0 && req.gap != req.resp+1 {
			req.gap = req.resp + 1
			qp.rewind(want)
		}
		return
	}
	op := pkt.Opcode()
	wantFirst := req.resp == 0
	isFirst := op == roce.RCRDMAReadResponseFirst || op == roce.RCRDMAReadResponseOnly
	isLast := op == roce.RCRDMAReadResponseLast || op == roce.RCRDMAReadResponseOnly
	pmtu := uint32(qp.cfg.PMTU)
	off := req.resp * pmtu
	want := min(pmtu, req.length-min(off, req.length))
	if wantFirst != isFirst || isLast != (req.resp+1 == req.npsn) || uint32(len(pkt.Payload)) != want {
		qp.failRequest(req, transport.StatusBadRespErr)
		return
	}
	if want > 0 {
		if err := qp.mem.Copy(req.wr.Segs, uint64(off), pkt.Payload, true); err != nil {
			qp.failRequest(req, transport.StatusLocProtErr)
			return
		}
	}
	req.resp++
	// The response implicitly acknowledges everything before the READ.
	qp.acked(roce.PSNAdd(req.first, -1), true)
	qp.retries = qp.cfg.RetryCnt
	if isLast {
		req.done = true
		qp.acked(req.last(), true)
	}
}
