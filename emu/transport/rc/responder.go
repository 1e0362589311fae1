package rc

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The responder: request packets checked against the connection and the
// expected PSN, validated and executed in order (the IBTA pipeline),
// duplicates answered from the responder resources, READ and atomic
// responses built from them.

// ReceiveFrom handles an RC packet that arrived in an IP datagram from src
// to dst (plain IPv4 or IPv6 addresses, as roce.Unframe returns them). A
// connected QP takes packets from its peer only, as rxe's check_addr: the
// packet is dropped, and ReceiveFrom returns false (the device counts it),
// unless src is the destination of the QP's path and dst the source, the
// addresses the QP's own packets carry. The path is resolved again for
// every packet, so a GID unbound since the connection was made stops it.
// A QP that does not receive (RESET, INIT, ERR) drops every packet, as
// Receive does.
func (qp *QP) ReceiveFrom(pkt *roce.Packet, src, dst netip.Addr) bool {
	return qp.ReceiveRunFrom(pkt, 1, src, dst, nil, nil)
}

// ReceiveRunFrom handles a run from src to dst (roce.ParseRun): n
// consecutive full-PMTU MIDDLE packets of one message, pkt's PSN the
// first's and its payload all of theirs. It does what n calls of
// ReceiveFrom with those packets would do: an in-order run that passes
// every check is executed at once (one validation, one copy into guest
// memory, one ACK); any other (out of sequence, duplicate, a fault that
// answers packets one by one, a length or memory failure) is taken apart
// and its packets handled one at a time. n == 1 is ReceiveFrom.
//
// from, when not nil, is where the run's payload lies (another HCA's
// memory, lent: roce.ParseRunLent), pkt.Payload being empty: an executed
// run copies it straight into guest memory; one taken apart is first read
// into scratch (at least from.Len() bytes). A payload that cannot be read
// any more is a run lost on the wire: dropped.
func (qp *QP) ReceiveRunFrom(pkt *roce.Packet, n int, src, dst netip.Addr, from mr.Source, scratch []byte) bool {
	if !transport.Receives(qp.state) {
		return true
	}
	path, ok := qp.env.Path()
	if !ok || src != path.Dst || dst != path.Src {
		qp.log.Debug("RC packet from outside the connection dropped", "src", src, "dst", dst,
			"path_src", path.Src, "path_dst", path.Dst)
		return false
	}
	qp.ReceiveRun(pkt, n, from, scratch)
	return true
}

// ReceiveRun is ReceiveRunFrom for a packet whose source the caller
// checked (an InfiniBand port, by the LID the subnet vouches for).
func (qp *QP) ReceiveRun(pkt *roce.Packet, n int, from mr.Source, scratch []byte) {
	if !transport.Receives(qp.state) {
		return
	}
	if n <= 1 {
		qp.Receive(pkt)
		return
	}
	if qp.executeRun(pkt, n, from) {
		return
	}
	if from != nil {
		size := from.Len()
		if size > len(scratch) || from.ReadAt(scratch[:size], 0) != nil {
			qp.log.Debug("RC run dropped: its payload is gone", "psn", pkt.BTH.PSN())
			return
		}
		pkt.Payload = scratch[:size:size]
	}
	var bth [roce.BTHSize]byte
	for i := range n {
		one := roce.RunPacket(pkt, i, n, bth[:])
		qp.Receive(&one)
	}
}

// executeRun executes an in-order run of n MIDDLE packets at once when
// every check the packets would meet one at a time passes for all of them,
// and reports whether it did. On false nothing of the QP's state has
// changed; guest memory may hold part of the run's payload, at the place
// the packets, handled one at a time, write it again.
func (qp *QP) executeRun(pkt *roce.Packet, n int, from mr.Source) bool {
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	payload := pkt.Payload
	size := len(payload)
	if from != nil {
		size = from.Len()
	}
	if qp.cfg.Responder != nil || roce.PSNDiff(psn, qp.ePSN) != 0 || size != n*qp.cfg.PMTU {
		return false
	}
	switch op {
	case roce.RCSendMiddle:
		cur := qp.recv
		if !qp.inSend || qp.inWrite || cur == nil || qp.recvOff+uint64(size) > uint64(cur.Cap) {
			return false
		}
		var err error
		if from != nil {
			err = qp.mem.CopyFrom(cur.Segs, qp.recvOff, from)
		} else {
			err = qp.mem.Copy(cur.Segs, qp.recvOff, payload, true)
		}
		if err != nil {
			return false
		}
		qp.recvOff += uint64(size)
	case roce.RCRDMAWriteMiddle:
		if !qp.inWrite || qp.inSend || uint64(size) > qp.writeRem {
			return false
		}
		var err error
		if from != nil {
			err = qp.mem.WriteFrom(qp.writeRef, qp.writeVA, from)
		} else {
			err = qp.mem.Write(qp.writeRef, qp.writeVA, payload)
		}
		if err != nil {
			return false
		}
		qp.writeVA += uint64(size)
		qp.writeRem -= uint64(size)
	default:
		return false
	}
	qp.nakSent = false
	last := roce.PSNAdd(psn, n-1)
	qp.ePSN = roce.PSNAdd(last, 1)
	if pkt.BTH.AckReq() {
		qp.sendAck(last, roce.SyndromeACKNoCredit)
	}
	return true
}

// Receive handles an RC packet for this QP (a request for the responder,
// or a response for the requester) whose addresses the caller has checked
// (ReceiveFrom does; tests of the state machine call Receive directly).
//
// An XRC QP takes XRC packets only, and any other QP no XRC packet: an
// XRC packet's BTH opcode is rewritten to its RC operation's (the packet
// is the caller's, received) before it goes on as an RC one.
func (qp *QP) Receive(pkt *roce.Packet) {
	if x := pkt.Opcode().Transport() == roce.TransportXRC; x != qp.cfg.XRC {
		return
	} else if x {
		pkt.BTH.SetOpcode(pkt.Opcode().RC())
	}
	op := pkt.Opcode()
	info, _ := op.Info()
	if info.Response {
		qp.response(pkt)
		return
	}
	if !transport.Receives(qp.state) {
		return
	}
	psn := pkt.BTH.PSN()
	diff := roce.PSNDiff(psn, qp.ePSN)
	switch {
	case diff > 0:
		qp.stats.OutOfSequence++
		if !qp.nakSent {
			qp.nakSent = true
			qp.sendAck(qp.ePSN, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		}
		return
	case diff < 0:
		qp.stats.Duplicates++
		qp.duplicate(pkt)
		return
	}
	qp.nakSent = false
	if qp.cfg.Responder != nil && qp.injected(pkt) {
		return
	}
	qp.execute(pkt)
}

// injected asks Config.Responder about an in-order request and carries
// out its answer; true: the packet is answered and not executed.
func (qp *QP) injected(pkt *roce.Packet) bool {
	psn := pkt.BTH.PSN()
	f := qp.cfg.Responder(*pkt)
	switch f.Kind {
	case FaultNAK:
		switch f.NAK {
		case roce.NAKPSNSequenceError:
			qp.nakSent = true
			qp.sendAck(psn, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		case roce.NAKRemoteAccessError:
			qp.nak(psn, f.NAK, transport.EventQPAccessError)
		case roce.NAKRemoteOperationalErr:
			qp.nak(psn, f.NAK, transport.EventQPFatal)
		default:
			qp.nak(psn, f.NAK, transport.EventQPRequestErr)
		}
		return true
	case FaultRNRNAK:
		qp.sendAck(psn, roce.RNRNAKSyndrome(f.RNRTimer))
		return true
	case FaultSuppressACK:
		qp.suppressAck = true
		qp.execute(pkt)
		qp.suppressAck = false
		return true
	}
	return false
}

// sendAck sends an ACK or NAK with the current MSN, after any responses
// still queued.

func isSendOp(op roce.Opcode) bool {
	return op <= roce.RCSendOnlyWithImmediate || op == roce.RCSendLastWithInvalidate || op == roce.RCSendOnlyWithInvalidate
}

func isWriteOp(op roce.Opcode) bool {
	return op >= roce.RCRDMAWriteFirst && op <= roce.RCRDMAWriteOnlyWithImmediate
}

// execute runs the validation pipeline (rocev2.md §4.2) and executes an
// in-order request packet: the opcode in sequence with the message in
// progress, permitted by the QP's access flags and responder resources, a
// receive request for what consumes one (else an RNR NAK), the payload
// length, then the operation itself with its own checks. Each check that
// fails NAKs as IBTA says; the QP's expected PSN moves only when the packet
// was executed.
func (qp *QP) execute(pkt *roce.Packet) {
	op := pkt.Opcode()
	info, _ := op.Info()
	psn := pkt.BTH.PSN()
	first := info.Pos == roce.PosFirst || info.Pos == roce.PosOnly
	last := info.Pos == roce.PosLast || info.Pos == roce.PosOnly
	if !qp.inSequence(op, first) || !qp.permitted(op, first) {
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	needRQ := (isSendOp(op) && first) || (last && (op == roce.RCRDMAWriteLastWithImmediate || op == roce.RCRDMAWriteOnlyWithImmediate))
	var recv transport.RecvWR
	if needRQ {
		var ok bool
		if recv, ok = qp.receiveRequest(psn); !ok {
			return
		}
	}
	if roce.CheckPayloadLen(op, len(pkt.Payload), qp.cfg.PMTU) != nil {
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	switch {
	case isSendOp(op):
		if !qp.executeSend(pkt, recv, first, last) {
			return
		}
	case isWriteOp(op):
		if !qp.executeWrite(pkt, recv, needRQ, first, last) {
			return
		}
	case op == roce.RCRDMAReadRequest:
		qp.executeRead(pkt) // answered by its READ responses
		return
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		qp.executeAtomic(pkt) // answered by its atomic acknowledge
		return
	default:
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	qp.ePSN = roce.PSNAdd(psn, 1)
	if pkt.BTH.AckReq() {
		qp.sendAck(psn, roce.SyndromeACKNoCredit)
	}
}

// inSequence reports whether opcode op may come now: a SEND packet only
// within a SEND message (a FIRST or ONLY only outside one), a WRITE packet
// likewise, anything else only between messages.
func (qp *QP) inSequence(op roce.Opcode, first bool) bool {
	switch {
	case isSendOp(op):
		return !qp.inWrite && qp.inSend != first
	case isWriteOp(op):
		return !qp.inSend && qp.inWrite != first
	default:
		return !qp.inSend && !qp.inWrite
	}
}

// permitted reports whether the QP's access flags (and, for READ and
// atomics, its responder resources) allow opcode op.
func (qp *QP) permitted(op roce.Opcode, first bool) bool {
	access := qp.cfg.Access
	switch {
	case op == roce.RCRDMAReadRequest:
		return access&mr.RemoteRead != 0 && qp.cfg.MaxDestRdAtomic != 0
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		return access&mr.RemoteAtomic != 0 && qp.cfg.MaxDestRdAtomic != 0
	case isWriteOp(op) && first:
		return access&mr.RemoteWrite != 0
	}
	return true
}

// receiveRequest peeks the receive request a packet at psn consumes. None
// posted: an RNR NAK; one that failed validation: completed with
// LOC_QP_OP_ERR, a remote operational NAK and QP_FATAL. ok=false: the
// packet stops here.
func (qp *QP) receiveRequest(psn uint32) (recv transport.RecvWR, ok bool) {
	recv, status, ok := qp.env.PeekRecv()
	if !ok {
		qp.sendAck(psn, roce.RNRNAKSyndrome(qp.cfg.MinRNRTimer))
		return recv, false
	}
	if status != transport.StatusSuccess {
		qp.env.PopRecv()
		qp.completeRecv(transport.Completion{WRID: recv.ID, Opcode: transport.WCRecv, Status: transport.StatusLocQPOpErr})
		qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
		return recv, false
	}
	return recv, true
}

// executeSend places a SEND packet's payload in the receive request (recv,
// taken on the FIRST packet), checked against the request's buffers and
// their region; the LAST completes it, with its immediate data or the
// invalidation it asks for. false: the packet failed (NAKed or the QP in
// ERR).
func (qp *QP) executeSend(pkt *roce.Packet, recv transport.RecvWR, first, last bool) bool {
	psn, payload := pkt.BTH.PSN(), pkt.Payload
	if first {
		qp.env.PopRecv()
		qp.recvHeld = recv
		qp.recv, qp.recvOff, qp.inSend = &qp.recvHeld, 0, true
	}
	cur := qp.recv
	if qp.recvOff+uint64(len(payload)) > uint64(cur.Cap) {
		// Larger than the receive buffers.
		qp.recv, qp.inSend = nil, false
		qp.completeRecv(transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, Status: transport.StatusLocLenErr})
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return false
	}
	if err := qp.mem.Copy(cur.Segs, qp.recvOff, payload, true); err != nil {
		qp.recv, qp.inSend = nil, false
		qp.completeRecv(transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, Status: transport.StatusLocProtErr})
		qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPAccessError)
		return false
	}
	qp.recvOff += uint64(len(payload))
	if !last {
		return true
	}
	qp.recv, qp.inSend = nil, false
	c := transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, ByteLen: uint32(qp.recvOff)}
	if pkt.ImmDt != nil {
		copy(c.Imm[:], pkt.ImmDt)
		c.HasImm = true
	}
	if pkt.IETH != nil {
		key := pkt.IETH.RKey()
		if !qp.mem.Invalidate(qp.cfg.PD, key) {
			// An R_Key this QP may not invalidate: the receive fails and
			// the requester gets NAK Invalid Request (its REM_INV_REQ),
			// not silence it would retry into RETRY_EXC.
			c.Status = transport.StatusRemInvReq
			qp.completeRecv(c)
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return false
		}
		binary.LittleEndian.PutUint32(c.Imm[:], key)
		c.Invalidated = true
	}
	qp.msn = roce.PSNAdd(qp.msn, 1)
	c.Solicited = pkt.BTH.SE()
	qp.completeRecv(c)
	return true
}

// executeWrite writes a WRITE packet's payload: the FIRST checks the RETH
// (length, R_Key, range, access) and keeps a reference to the region,
// every packet is checked against the length the RETH left and written
// through the reference (re-validated), and a LAST with immediate data
// consumes the receive request recv. false: the packet failed.
func (qp *QP) executeWrite(pkt *roce.Packet, recv transport.RecvWR, needRQ, first, last bool) bool {
	psn, payload := pkt.BTH.PSN(), pkt.Payload
	if first {
		reth := pkt.RETH
		va, key, n := reth.VA(), reth.RKey(), uint64(reth.DMALength())
		if n > maxRDMAMessage {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return false
		}
		var ref mr.Ref
		if n > 0 {
			var ok bool
			if ref, ok = qp.mem.Remote(qp.cfg.PD, key, va, n, mr.RemoteWrite); !ok {
				qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
				return false
			}
		}
		qp.writeRef, qp.writeVA, qp.writeRem, qp.inWrite = ref, va, n, true
		qp.writeLen = uint32(n)
	}
	// The payload against the length the RETH left.
	n := uint64(len(payload))
	if n > qp.writeRem || (!last && n != uint64(qp.cfg.PMTU)) || (last && n != qp.writeRem) {
		qp.inWrite = false
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return false
	}
	if n > 0 {
		if err := qp.mem.Write(qp.writeRef, qp.writeVA, payload); err != nil {
			qp.inWrite = false
			if errors.Is(err, mr.ErrStale) {
				// The region went (or was invalidated, or registered
				// again) since the first packet: the R_Key is no
				// longer valid, as if the request had named it now.
				qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
				return false
			}
			qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
			return false
		}
	}
	qp.writeVA += n
	qp.writeRem -= n
	if last {
		qp.inWrite = false
		qp.msn = roce.PSNAdd(qp.msn, 1)
		if needRQ {
			qp.env.PopRecv()
			c := transport.Completion{WRID: recv.ID, Opcode: transport.WCRecvWriteImm, ByteLen: qp.writeLen, HasImm: true,
				Solicited: pkt.BTH.SE()}
			copy(c.Imm[:], pkt.ImmDt)
			qp.completeRecv(c)
		}
	}
	return true
}

// executeRead checks a READ request (length, R_Key, range, access), keeps
// it as a responder resource and starts its responses.
func (qp *QP) executeRead(pkt *roce.Packet) {
	psn, reth := pkt.BTH.PSN(), pkt.RETH
	va, key, n := reth.VA(), reth.RKey(), reth.DMALength()
	if uint64(n) > maxRDMAMessage {
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	var ref mr.Ref
	if n > 0 {
		var ok bool
		if ref, ok = qp.mem.Remote(qp.cfg.PD, key, va, uint64(n), mr.RemoteRead); !ok {
			qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
			return
		}
	}
	pmtu := uint32(qp.cfg.PMTU)
	count := max(1, (n+pmtu-1)/pmtu)
	res := qp.newResource()
	*res = resource{valid: true, first: psn, last: roce.PSNAdd(psn, int(count)-1), va: va, rkey: key, ref: ref, length: n}
	qp.msn = roce.PSNAdd(qp.msn, 1)
	qp.ePSN = roce.PSNAdd(psn, int(count))
	qp.readRespond(res, psn)
}

// executeAtomic checks an atomic request (alignment, R_Key, range,
// access), executes it on guest memory, keeps it as a responder resource
// (a duplicate is answered from it, never executed again) and queues its
// acknowledge.
func (qp *QP) executeAtomic(pkt *roce.Packet) {
	psn, op, atomicETH := pkt.BTH.PSN(), pkt.Opcode(), pkt.AtomicETH
	va, key := atomicETH.VA(), atomicETH.RKey()
	if va%8 != 0 {
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	ref, ok := qp.mem.Remote(qp.cfg.PD, key, va, 8, mr.RemoteAtomic)
	if !ok {
		qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
		return
	}
	orig, err := qp.mem.Atomic(ref, va, op == roce.RCCompareSwap, atomicETH.Compare(), atomicETH.SwapAdd())
	if err != nil {
		qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
		return
	}
	res := qp.newResource()
	*res = resource{valid: true, atomic: true, first: psn, last: psn, va: va, rkey: key, length: 8, orig: orig}
	qp.msn = roce.PSNAdd(qp.msn, 1)
	qp.ePSN = roce.PSNAdd(psn, 1)
	qp.respond(respItem{kind: respAtomic, res: *res})
}

// newResource recycles the oldest responder resource.
func (qp *QP) newResource() *resource {
	res := &qp.res[qp.resNext]
	qp.resNext = (qp.resNext + 1) % rcResources
	return res
}

// readRespond queues the READ responses of resource res from PSN from on
// (a duplicate READ restarts a stream still queued).
func (qp *QP) readRespond(res *resource, from uint32) {
	next := uint32(roce.PSNDiff(from, res.first))
	for i := range qp.out {
		if item := &qp.out[i]; item.kind == respRead && item.res.first == res.first {
			item.next = min(item.next, next)
			return
		}
	}
	qp.respond(respItem{kind: respRead, res: *res, next: next})
}

// readPacket sends READ response packet i of resource res.
func (qp *QP) readPacket(res *resource, i uint32) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	pmtu := uint32(qp.cfg.PMTU)
	f := qp.fields(0, roce.PSNAdd(res.first, int(i)))
	switch transport.Position(i, res.count()) {
	case 0:
		f.BTH.Opcode = roce.RCRDMAReadResponseFirst
	case 1:
		f.BTH.Opcode = roce.RCRDMAReadResponseMiddle
	case 2:
		f.BTH.Opcode = roce.RCRDMAReadResponseLast
	default:
		f.BTH.Opcode = roce.RCRDMAReadResponseOnly
	}
	if f.BTH.Opcode != roce.RCRDMAReadResponseMiddle {
		f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: qp.msn}
	}
	off := i * pmtu
	n := min(pmtu, res.length-min(off, res.length))
	payload := transport.Payload{Len: int(n)}
	if n > 0 {
		// Re-validated now: the registration the READ was checked against
		// must still hold; if it went, the caller NAKs.
		payload.Ref, payload.VA = res.ref, res.va+uint64(off)
		if !qp.mem.Valid(payload.Ref, payload.VA, uint64(n)) {
			return mr.ErrStale
		}
	}
	err := qp.transmit(path, f, payload)
	if err != nil && !errors.Is(err, transport.ErrPeerBusy) {
		qp.log.Debug("READ response failed", "err", err)
		return nil
	}
	return err
}

// atomicAck sends the atomic acknowledge of resource res.
func (qp *QP) atomicAck(res *resource) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	f := qp.fields(roce.RCAtomicAcknowledge, res.first)
	f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: qp.msn}
	f.AtomicAckETH = res.orig
	return qp.transmit(path, f, transport.Payload{})
}

// duplicate answers a duplicate request (rocev2.md §4.6).
func (qp *QP) duplicate(pkt *roce.Packet) {
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	switch {
	case op == roce.RCRDMAReadRequest:
		reth := pkt.RETH
		for i := range qp.res {
			res := &qp.res[i]
			if res.valid && !res.atomic && roce.PSNInRange(psn, res.first, res.last) && res.rkey == reth.RKey() {
				end, ok := dma.End(reth.VA(), uint64(reth.DMALength()))
				if !ok || reth.VA() < res.va || end > res.va+uint64(res.length) {
					return
				}
				if res.length > 0 && !qp.mem.Valid(res.ref, res.va, uint64(res.length)) {
					// Its region went since the READ executed: the replay
					// is refused (a NAK, never data), as a new READ would be.
					qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
					return
				}
				qp.readRespond(res, psn)
				return
			}
		}
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		for i := range qp.res {
			res := &qp.res[i]
			if res.valid && res.atomic && res.first == psn {
				qp.respond(respItem{kind: respAtomic, res: *res})
				return
			}
		}
	default:
		qp.sendAck(roce.PSNAdd(qp.ePSN, -1), roce.SyndromeACKNoCredit)
	}
}
