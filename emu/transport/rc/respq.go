package rc

import (
	"errors"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The response queue: ACKs, NAKs, READ responses and atomic acknowledges
// the responder owes, sent in PSN order, held and coalesced while a batch is
// taken, bounded whatever the peer sends, and the class-C NAK a QP in ERR
// still owes.

func (qp *QP) sendAck(psn uint32, syn roce.Syndrome) {
	if qp.suppressAck && syn.IsACK() {
		return // an injected fault keeps this ACK back
	}
	qp.respond(respItem{kind: respAck, psn: psn, syn: syn, msn: qp.msn})
}

// respond sends a response now, or queues it behind the ones waiting.
//
// The queue is bounded, whatever the peer sends while a long READ stream is
// queued: an ACK or NAK replaces a plain ACK queued at the tail behind
// another response (ACKs are cumulative: the later one acknowledges what
// the earlier did; a NAK acknowledges the PSNs before its own), and beyond
// maxQueuedResponses a response is dropped (the requester's retry asks
// again). A queued NAK is never replaced.
func (qp *QP) respond(item respItem) {
	out := qp.out
	switch {
	case !qp.hold && len(out) > 1 && item.kind == respAck && out[len(out)-1].kind == respAck && out[len(out)-1].syn.IsACK():
		out[len(out)-1] = item
		return
	case qp.hold && len(out) > 0 && coalesces(&out[len(out)-1], &item):
		out[len(out)-1] = item
		return
	case len(out) >= maxQueuedResponses:
		return
	}
	if len(out) == 0 {
		out = qp.outStore[:0] // the queue's storage, kept from its last use
	}
	qp.out = append(out, item)
	if len(qp.out) == 1 {
		qp.outStore = qp.out[:0]
		if !qp.hold {
			qp.FlushResponses()
		}
	}
}

// coalesces reports whether a held ACK may stand for the one queued
// before it: both plain ACKs (no NAK, no RNR NAK), the later for a PSN at or
// past the earlier's. ACKs are cumulative: the later one acknowledges what
// the earlier did.
func coalesces(queued, item *respItem) bool {
	return queued.kind == respAck && item.kind == respAck && queued.syn.IsACK() && item.syn.IsACK() &&
		roce.PSNDiff(item.psn, queued.psn) >= 0
}

// HoldResponses keeps the responses the QP owes queued until
// ReleaseResponses, and lets a plain ACK replace a queued plain ACK for an
// earlier PSN: a batch of request packets taken at once is acknowledged
// once, as hardware coalesces ACKs, instead of once per packet. A NAK
// sends what is held first, and itself at once.
func (qp *QP) HoldResponses() { qp.hold = true }

// Holding reports whether responses are held (HoldResponses; a class-C NAK
// ends the hold early).
func (qp *QP) Holding() bool { return qp.hold }

// ReleaseResponses ends HoldResponses and sends what is queued.
func (qp *QP) ReleaseResponses() {
	qp.hold = false
	if len(qp.out) > 0 {
		qp.FlushResponses()
	}
}

// FlushResponses sends queued responses in order: at most respBatch READ
// response packets per call; the device is kicked to go on (later, when the
// requester's queue is full).
//
// In ERR it sends only the class-C NAK the QP still owes (nak), if any.
func (qp *QP) FlushResponses() {
	if qp.state == transport.StateErr {
		qp.flushLastWord()
		return
	}
	budget := respBatch
	for len(qp.out) > 0 {
		item := &qp.out[0]
		var err error
		switch item.kind {
		case respAck:
			err = qp.sendAckNow(item.psn, item.syn, item.msn)
		case respAtomic:
			err = qp.atomicAck(&item.res)
		case respRead:
			for err == nil && item.next < item.res.count() && budget > 0 {
				if err = qp.readPacket(&item.res, item.next); err == nil {
					item.next++
					budget--
				}
			}
			if errors.Is(err, mr.ErrStale) {
				// The region went while its responses were being sent:
				// the rest of the READ is refused, never read.
				qp.out = nil
				qp.nak(roce.PSNAdd(item.res.first, int(item.next)), roce.NAKRemoteAccessError, transport.EventQPAccessError)
				return
			}
			if err == nil && item.next < item.res.count() {
				qp.env.Kick(transport.WorkRespond, false)
				return
			}
		}
		if errors.Is(err, transport.ErrPeerBusy) {
			qp.env.Kick(transport.WorkRespond, true)
			return
		}
		qp.out = qp.out[1:]
	}
	qp.out = nil
}

// sendAckNow sends an ACK or NAK with MSN msn.
func (qp *QP) sendAckNow(psn uint32, syn roce.Syndrome, msn uint32) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	f := qp.fields(roce.RCAcknowledge, psn)
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: msn}
	return qp.transmit(path, f, transport.Payload{})
}

// nak sends a class-C NAK (at once: the QP stops here) and moves the QP to
// ERR. The segment is lossless: where the NAK cannot go now (responses
// still queued before it, or the receiver's queue full) it is owed, and
// FlushResponses sends it once the peer takes it, so the requester ends
// with the remote error and not with a retry count exceeded.
func (qp *QP) nak(psn uint32, code roce.NAKCode, ev transport.Event) {
	if qp.hold {
		qp.ReleaseResponses() // the ACKs held before it go first
	}
	item := respItem{kind: respAck, psn: psn, syn: roce.NAKSyndrome(code), msn: qp.msn}
	if len(qp.out) > 0 || errors.Is(qp.sendAckNow(psn, item.syn, item.msn), transport.ErrPeerBusy) {
		qp.lastWord, qp.owesNAK = item, true
		qp.env.Kick(transport.WorkRespond, true)
	}
	qp.env.Error(ev)
}

// flushLastWord sends the NAK a QP in ERR still owes (nak).
func (qp *QP) flushLastWord() {
	qp.out = nil // a QP in ERR answers nothing else
	if !qp.owesNAK {
		return
	}
	w := &qp.lastWord
	if errors.Is(qp.sendAckNow(w.psn, w.syn, w.msn), transport.ErrPeerBusy) {
		qp.env.Kick(transport.WorkRespond, true)
		return
	}
	qp.owesNAK = false
}
