package emu

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/uverbs"
)

// RC transport (rocev2.md §3, §4): a go-back-N requester with cumulative
// ACKs, a retransmission timer and RNR back-off, and a responder with an
// expected PSN, MSN, responder resources for READ and atomic replays, and
// the IBTA validation pipeline.

const (
	rcWindow       = 512 // most PSNs outstanding per QP
	rcAckEvery     = 64  // AckReq inside long messages
	rcResources    = 16  // responder READ/atomic resources per QP
	rcInfiniteRNR  = 7
	maxRDMAMessage = 1 << 31
)

// txWQE is a send WQE the requester has taken from the SQ: its private copy
// and where it stands on the wire.
type txWQE struct {
	w      uverbs.SendWQE
	segs   []seg
	length uint32
	first  uint32 // first PSN
	npsn   uint32 // PSNs it uses: packets, or READ response packets
	next   uint32 // next packet to (re)send; READ/atomic: 0 or 1 (request sent)
	resp   uint32 // READ: response packets placed
	gap    uint32 // READ: 1 + the response index last re-requested after a gap
	done   bool
	status uint32 // a local error found when it was taken
	local  bool   // LOCAL_INV / FAST_REG_MR: no packets
	rdAtom bool   // READ or atomic
}

func (t *txWQE) last() uint32 { return roce.PSNAdd(t.first, int(t.npsn)-1) }

// rcState is the RC engine state of one QP.
type rcState struct {
	// Requester.
	tx         []*txWQE
	nextPSN    uint32 // PSN of the next new WQE
	unacked    uint32 // oldest unacknowledged PSN
	retries    uint8
	rnrRetries uint8
	rnrWait    bool
	timer      *time.Timer
	timerGen   uint64
	sinceAck   int
	// Responder.
	ePSN    uint32
	msn     uint32
	nakSent bool
	inSend  bool
	inWrite bool
	rwqe    *recvWQE
	rOff    uint64
	wMR     *mr
	wVA     uint64
	wRem    uint64
	res     [rcResources]rdRes
	resNext int
	// writeLen is the DMA length of the WRITE in progress.
	writeLen uint32
	// out holds responses waiting behind a READ response stream, in PSN
	// order.
	out []respItem
}

// respItem is a response the responder owes: a READ response stream (sent
// in bounded batches, so a large READ cannot overflow the requester's
// queue), an atomic acknowledge, or an ACK/NAK.
type respItem struct {
	kind uint8 // respRead, respAtomic, respAck
	res  rdRes // a copy: the resource ring may recycle the entry
	next uint32
	psn  uint32
	syn  roce.Syndrome
}

const (
	respRead = iota
	respAtomic
	respAck

	respBatch = 64 // READ response packets per engine turn

	// maxQueuedResponses bounds a QP's response queue: the READ and atomic
	// resources it can replay, plus room for the ACKs between them.
	maxQueuedResponses = 4 * rcResources
)

// rdRes is a responder resource: a READ or atomic that can be replayed.
type rdRes struct {
	valid  bool
	atomic bool
	first  uint32
	last   uint32
	va     uint64
	rkey   uint32
	length uint32
	orig   uint64
}

// rcReset clears the RC state (QP to RESET, or destroyed).
func (d *Device) rcReset(x *qp) {
	if x.rc.timer != nil {
		x.rc.timer.Stop()
	}
	x.rc = rcState{timerGen: x.rc.timerGen + 1}
}

// rcInit latches PSNs when the QP reaches RTR (ePSN) and RTS (send PSN).
func (d *Device) rcOnState(x *qp, prev, next uint8) {
	if next == StateRTR && prev != StateRTR {
		x.rc.ePSN = x.attr.RQPSN
	}
	if next == StateRTS && prev == StateRTR {
		x.rc.nextPSN = x.attr.SQPSN
		x.rc.unacked = x.attr.SQPSN
		x.rc.retries = x.attr.RetryCnt
		x.rc.rnrRetries = x.attr.RNRRetry
	}
}

func (x *qp) pmtu() int { return mtuBytes(x.attr.PathMTU) }

// rcPath is where the QP's packets go.
func (d *Device) rcPath(x *qp) (path, bool) {
	p, ok := d.pathFor(x.attr.AH.SGIDIndex, x.attr.AH.DGID)
	if !ok {
		return p, false
	}
	p.dmac, p.hopLimit, p.tclass, p.flowLabel = x.attr.AH.DMAC, x.attr.AH.HopLimit, x.attr.AH.TrafficClass, x.attr.AH.FlowLabel
	p.srcPort = roce.UDPSourcePort(x.attr.AH.FlowLabel, x.qpn, x.attr.DestQPN)
	return p, true
}

// ---- requester ---------------------------------------------------------------

// rcTake moves posted WQEs from the SQ ring into the requester (at most one
// ring's worth in flight) and assigns their PSNs.
func (d *Device) rcTake(x *qp) {
	n, err := d.pendingWQEs(x.pages, &x.sq)
	if err != nil {
		d.log.Warn("SQ producer index invalid", "qp", x.handle, "err", err)
		d.qpError(x, EvQPFatal)
		return
	}
	buf := make([]byte, x.sq.stride)
	for ; n > 0 && uint32(len(x.rc.tx)) < x.sq.ring.N; n-- {
		if err := d.takeWQE(x.pages, &x.sq, buf); err != nil {
			d.qpError(x, EvQPFatal)
			return
		}
		t := &txWQE{}
		t.w, err = uverbs.DecodeSendWQE(buf, x.sq.maxSGE)
		if err != nil {
			t.status = uverbs.WCLocLenErr
		} else {
			d.rcPrepare(x, t)
		}
		x.rc.tx = append(x.rc.tx, t)
	}
}

// rcPrepare validates a WQE and assigns its PSNs.
func (d *Device) rcPrepare(x *qp, t *txWQE) {
	w := &t.w
	pm := uint32(x.pmtu())
	switch w.Opcode {
	case uverbs.OpSend, uverbs.OpSendImm, uverbs.OpSendInv, uverbs.OpRDMAWrite, uverbs.OpRDMAWriteImm:
		t.segs, t.length, t.status = d.segsFor(x, w.SGE, false)
		t.npsn = max(1, (t.length+pm-1)/pm)
	case uverbs.OpRDMARead:
		t.segs, t.length, t.status = d.segsFor(x, w.SGE, true)
		t.npsn = max(1, (t.length+pm-1)/pm)
		t.rdAtom = true
	case uverbs.OpAtomicCmpSwp, uverbs.OpAtomicFetchAdd:
		t.segs, t.length, t.status = d.segsFor(x, w.SGE, true)
		if t.status == uverbs.WCSuccess && t.length < 8 {
			t.status = uverbs.WCLocLenErr
		}
		t.length = 8
		t.npsn = 1
		t.rdAtom = true
	case uverbs.OpLocalInv, uverbs.OpFastRegMR:
		t.local = true
	default:
		t.status = uverbs.WCLocQPOpErr
	}
	if t.status != uverbs.WCSuccess || t.local {
		t.npsn = 0
		return
	}
	t.first = x.rc.nextPSN
	x.rc.nextPSN = roce.PSNAdd(x.rc.nextPSN, int(t.npsn))
}

// rcPump takes new WQEs, sends what the window allows, and completes what
// is done, in order.
func (d *Device) rcPump(x *qp) {
	if x.state != StateRTS && x.state != StateSQD {
		return
	}
	if x.state == StateRTS {
		d.rcTake(x)
	}
	d.rcComplete(x)
	if x.state == StateErr || x.rc.rnrWait {
		return
	}
	p, ok := d.rcPath(x)
	if !ok {
		return
	}
	rdOut := 0
	maxRd := max(1, int(x.attr.MaxRdAtomic))
	for _, t := range x.rc.tx {
		if t.done || t.local || t.npsn == 0 {
			if t.status != uverbs.WCSuccess || t.local {
				break // waits for the WQEs before it
			}
			continue
		}
		if t.rdAtom {
			if t.next == 0 && rdOut >= maxRd {
				break
			}
			rdOut++
		}
		if t.w.SendFlags&uverbs.SendFence != 0 && t.next == 0 && rdOut > 0 && !t.rdAtom {
			break
		}
		for t.next < t.packets() {
			psn := roce.PSNAdd(t.first, int(t.next))
			if roce.PSNDiff(psn, x.rc.unacked) >= rcWindow && roce.PSNDiff(psn, x.rc.unacked) > 0 {
				goto out
			}
			if err := d.rcSendPacket(x, &p, t); err != nil {
				if errors.Is(err, errPeerBusy) {
					d.eng.kickLater(x.handle, kickSend)
					return
				}
				d.completeTxError(x, t, uverbs.WCLocProtErr)
				return
			}
			t.next++
			d.rcArmTimer(x, false)
		}
	}
out:
}

// packets is the number of request packets of the WQE.
func (t *txWQE) packets() uint32 {
	if t.rdAtom {
		return 1
	}
	return t.npsn
}

var sendOps = [4][2]roce.Opcode{ // [first, middle, last, only][plain, imm]
	{roce.RCSendFirst, roce.RCSendFirst},
	{roce.RCSendMiddle, roce.RCSendMiddle},
	{roce.RCSendLast, roce.RCSendLastWithImmediate},
	{roce.RCSendOnly, roce.RCSendOnlyWithImmediate},
}

var writeOps = [4][2]roce.Opcode{
	{roce.RCRDMAWriteFirst, roce.RCRDMAWriteFirst},
	{roce.RCRDMAWriteMiddle, roce.RCRDMAWriteMiddle},
	{roce.RCRDMAWriteLast, roce.RCRDMAWriteLastWithImmediate},
	{roce.RCRDMAWriteOnly, roce.RCRDMAWriteOnlyWithImmediate},
}

func position(i, n uint32) int {
	switch {
	case n == 1:
		return 3
	case i == 0:
		return 0
	case i == n-1:
		return 2
	}
	return 1
}

// rcSendPacket sends packet t.next of WQE t.
func (d *Device) rcSendPacket(x *qp, p *path, t *txWQE) error {
	w := &t.w
	pm := uint32(x.pmtu())
	i := t.next
	f := rcFields(x, 0, roce.PSNAdd(t.first, int(i)))
	var n, off uint32
	pos := position(i, t.npsn)
	last := pos >= 2
	switch w.Opcode {
	case uverbs.OpSend, uverbs.OpSendImm, uverbs.OpSendInv:
		off = i * pm
		n = min(pm, t.length-off)
		imm := 0
		if w.Opcode == uverbs.OpSendImm {
			imm = 1
		}
		f.BTH.Opcode = sendOps[pos][imm]
		if last {
			if w.Opcode == uverbs.OpSendImm {
				f.ImmDt = be32(w.Ex)
			}
			if w.Opcode == uverbs.OpSendInv {
				f.BTH.Opcode = roce.RCSendLastWithInvalidate
				if pos == 3 {
					f.BTH.Opcode = roce.RCSendOnlyWithInvalidate
				}
				f.IETH = w.InvalidateRKey()
			}
			f.BTH.SE = w.SendFlags&uverbs.SendSolicited != 0
		}
	case uverbs.OpRDMAWrite, uverbs.OpRDMAWriteImm:
		off = i * pm
		n = min(pm, t.length-off)
		imm := 0
		if w.Opcode == uverbs.OpRDMAWriteImm {
			imm = 1
		}
		f.BTH.Opcode = writeOps[pos][imm]
		if i == 0 {
			va, rkey := w.RDMA()
			f.RETH = roce.RETHFields{VA: va, RKey: rkey, DMALength: t.length}
		}
		if last && imm == 1 {
			f.ImmDt = be32(w.Ex)
			f.BTH.SE = w.SendFlags&uverbs.SendSolicited != 0
		}
	case uverbs.OpRDMARead:
		va, rkey := w.RDMA()
		done := min(t.resp*pm, t.length) // bytes already placed (a re-request)
		f.BTH.Opcode = roce.RCRDMAReadRequest
		f.BTH.PSN = roce.PSNAdd(t.first, int(t.resp))
		f.RETH = roce.RETHFields{VA: va + uint64(done), RKey: rkey, DMALength: t.length - done}
		last = true
	case uverbs.OpAtomicCmpSwp, uverbs.OpAtomicFetchAdd:
		va, cmpAdd, swap, rkey := w.Atomic()
		f.BTH.Opcode = roce.RCCompareSwap
		f.AtomicETH = roce.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: swap, Compare: cmpAdd}
		if w.Opcode == uverbs.OpAtomicFetchAdd {
			f.BTH.Opcode = roce.RCFetchAdd
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = cmpAdd, 0
		}
		last = true
	}
	x.rc.sinceAck++
	if last || x.rc.sinceAck >= rcAckEvery {
		f.BTH.AckReq = true
		x.rc.sinceAck = 0
	}
	var gather func([]byte) error
	if n > 0 {
		segs, o := t.segs, uint64(off)
		gather = func(b []byte) error { return d.copySegs(segs, o, b, false) }
	}
	return d.transmit(p, &f, int(n), gather)
}

// rcArmTimer starts the retransmission timer if it is not running (or
// restarts it when progress was made).
func (d *Device) rcArmTimer(x *qp, restart bool) {
	t := roce.LocalACKTimeout(x.attr.Timeout)
	if t == 0 {
		return
	}
	if x.rc.timer != nil && !restart {
		return
	}
	d.rcStartTimer(x, t)
}

func (d *Device) rcStartTimer(x *qp, t time.Duration) {
	if x.rc.timer != nil {
		x.rc.timer.Stop()
	}
	x.rc.timerGen++
	gen, h := x.rc.timerGen, x.handle
	x.rc.timer = time.AfterFunc(t, func() { d.eng.kickTimer(h, gen) })
}

func (d *Device) rcStopTimer(x *qp) {
	if x.rc.timer != nil {
		x.rc.timer.Stop()
		x.rc.timer = nil
	}
	x.rc.timerGen++
}

// rcTimer handles an expired timer: the end of an RNR wait, or a
// retransmission timeout.
func (d *Device) rcTimer(x *qp, gen uint64) {
	if x.typ != QPTypeRC || gen != x.rc.timerGen || x.rc.timer == nil {
		return
	}
	x.rc.timer = nil
	if x.state != StateRTS && x.state != StateSQD {
		return
	}
	if x.rc.rnrWait {
		x.rc.rnrWait = false
		d.rcRewind(x, x.rc.unacked)
		d.rcPump(x)
		return
	}
	if !d.rcOutstanding(x) {
		return
	}
	if x.rc.retries == 0 {
		d.rcFailHead(x, uverbs.WCRetryExcErr)
		return
	}
	x.rc.retries--
	d.log.Debug("RC retransmission timeout", "qp", x.handle, "psn", x.rc.unacked, "retries_left", x.rc.retries)
	d.rcRewind(x, x.rc.unacked)
	d.rcPump(x)
}

// rcOutstanding reports whether packets await acknowledgement.
func (d *Device) rcOutstanding(x *qp) bool {
	for _, t := range x.rc.tx {
		if !t.done && t.npsn > 0 && t.next > 0 {
			return true
		}
	}
	return false
}

// rcRewind goes back to PSN from: every unfinished WQE at or after it is
// resent from there (READ and atomic requests whole).
func (d *Device) rcRewind(x *qp, from uint32) {
	for _, t := range x.rc.tx {
		if t.done || t.npsn == 0 {
			continue
		}
		if t.rdAtom {
			// Re-request: an atomic whole (the responder replays its saved
			// result), a READ from its first missing response on, so a
			// lossy link cannot keep a long READ from ever finishing.
			t.next = 0
			if t.w.Opcode != uverbs.OpRDMARead {
				t.resp = 0
			}
			continue
		}
		if roce.PSNDiff(from, t.first) <= 0 {
			t.next = 0
		} else if roce.PSNDiff(from, t.last()) <= 0 {
			t.next = uint32(roce.PSNDiff(from, t.first))
		}
	}
	x.rc.sinceAck = 0
}

// rcAcked handles a cumulative acknowledgement of every PSN up to psn.
func (d *Device) rcAcked(x *qp, psn uint32, progress bool) {
	for _, t := range x.rc.tx {
		if t.done || t.npsn == 0 {
			continue
		}
		if roce.PSNDiff(t.last(), psn) > 0 {
			break
		}
		if t.rdAtom {
			// Acknowledged past a READ/atomic whose response never came:
			// it was lost; retry it.
			if t.next > 0 {
				d.rcRewind(x, t.first)
			}
			break
		}
		t.done = true
	}
	if roce.PSNDiff(psn, x.rc.unacked) >= 0 {
		x.rc.unacked = roce.PSNAdd(psn, 1)
		progress = true
	}
	if progress {
		x.rc.retries = x.attr.RetryCnt
		x.rc.rnrRetries = x.attr.RNRRetry
	}
}

// rcComplete posts completions for finished WQEs at the head, in order.
func (d *Device) rcComplete(x *qp) {
	for len(x.rc.tx) > 0 && x.state != StateErr {
		t := x.rc.tx[0]
		switch {
		case t.status != uverbs.WCSuccess:
			d.completeTxError(x, t, t.status)
			return
		case t.local:
			if st := d.localOp(x, &t.w); st != uverbs.WCSuccess {
				d.completeTxError(x, t, st)
				return
			}
			t.done = true
		case !t.done:
			if !d.rcOutstanding(x) {
				d.rcStopTimer(x)
			}
			return
		}
		x.rc.tx = x.rc.tx[1:]
		d.completeSend(x, &t.w, uverbs.WCSuccess, t.length)
	}
	if len(x.rc.tx) == 0 {
		d.rcStopTimer(x)
		d.checkDrained(x)
	}
}

// completeTxError completes the head-of-line failure and moves the QP to
// ERR; everything after it is flushed.
func (d *Device) completeTxError(x *qp, t *txWQE, status uint32) {
	// WQEs before t that are done complete first, in order.
	for len(x.rc.tx) > 0 && x.rc.tx[0] != t && x.rc.tx[0].done {
		h := x.rc.tx[0]
		x.rc.tx = x.rc.tx[1:]
		d.completeSend(x, &h.w, uverbs.WCSuccess, h.length)
	}
	for i, h := range x.rc.tx {
		if h == t {
			x.rc.tx = x.rc.tx[i+1:]
			break
		}
	}
	d.completeSend(x, &t.w, status, 0)
	ev := uint32(EvQPReqErr)
	if status == uverbs.WCLocProtErr || status == uverbs.WCRemAccessErr {
		ev = EvQPAccessErr
	}
	d.qpError(x, ev)
}

// rcFailHead fails the oldest unfinished WQE with status.
func (d *Device) rcFailHead(x *qp, status uint32) {
	for _, t := range x.rc.tx {
		if !t.done {
			d.completeTxError(x, t, status)
			return
		}
	}
}

// rcFlushTx completes every WQE the requester holds with WR_FLUSH_ERR.
func (d *Device) rcFlushTx(x *qp) {
	tx := x.rc.tx
	x.rc.tx = nil
	d.rcStopTimer(x)
	for _, t := range tx {
		d.completeSend(x, &t.w, uverbs.WCWRFlushErr, 0)
	}
	if r := x.rc.rwqe; r != nil {
		x.rc.rwqe = nil
		d.completeRecv(x, &uverbs.CQE{WRID: r.w.WRID, Opcode: uverbs.WCRecv, Status: uverbs.WCWRFlushErr}, false)
	}
}

// rcResponse handles ACK, NAK, READ response and atomic acknowledge packets.
func (d *Device) rcResponse(x *qp, pkt *rxPkt) {
	if x.state != StateRTS && x.state != StateSQD {
		return
	}
	op := pkt.p.Opcode()
	psn := pkt.psn
	var syn roce.Syndrome
	if pkt.p.AETH != nil {
		syn = pkt.p.AETH.Syndrome()
	}
	switch op {
	case roce.RCAcknowledge:
		switch {
		case syn.IsACK():
			d.rcAcked(x, psn, false)
		case syn.IsRNRNAK():
			d.rcAcked(x, roce.PSNAdd(psn, -1), false)
			if x.rc.rnrRetries == 0 {
				d.rcFailHead(x, uverbs.WCRNRRetryExc)
				return
			}
			if x.rc.rnrRetries != rcInfiniteRNR {
				x.rc.rnrRetries--
			}
			x.rc.unacked = psn
			x.rc.rnrWait = true
			d.rcStartTimer(x, roce.RNRTimer(syn.Code()))
			return
		case syn.IsNAK():
			d.rcAcked(x, roce.PSNAdd(psn, -1), false)
			switch roce.NAKCode(syn.Code()) {
			case roce.NAKPSNSequenceError:
				if x.rc.retries == 0 {
					d.rcFailHead(x, uverbs.WCRetryExcErr)
					return
				}
				x.rc.retries--
				x.rc.unacked = psn
				d.rcRewind(x, psn)
			case roce.NAKInvalidRequest, roce.NAKInvalidRDRequest:
				d.rcFailAt(x, psn, uverbs.WCRemInvReqErr)
				return
			case roce.NAKRemoteAccessError:
				d.rcFailAt(x, psn, uverbs.WCRemAccessErr)
				return
			default:
				d.rcFailAt(x, psn, uverbs.WCRemOpErr)
				return
			}
		}
	case roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle, roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly:
		d.rcReadResponse(x, pkt)
	case roce.RCAtomicAcknowledge:
		for _, t := range x.rc.tx {
			if t.done || t.npsn == 0 {
				continue
			}
			if !t.rdAtom || t.w.Opcode == uverbs.OpRDMARead || t.first != psn || t.next == 0 {
				break
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], pkt.p.AtomicAckETH.OrigData())
			if err := d.copySegs(t.segs, 0, b[:], true); err != nil {
				d.completeTxError(x, t, uverbs.WCLocProtErr)
				return
			}
			d.rcAcked(x, roce.PSNAdd(psn, -1), true)
			t.done = true
			d.rcAcked(x, psn, true)
			break
		}
	default:
		return
	}
	d.rcAfterProgress(x)
}

// rcAfterProgress completes, re-arms the timer and sends more.
func (d *Device) rcAfterProgress(x *qp) {
	d.rcComplete(x)
	if x.state == StateErr {
		return
	}
	if d.rcOutstanding(x) {
		d.rcArmTimer(x, true)
	}
	d.rcPump(x)
}

// rcFailAt fails the WQE holding psn after completing those before it.
func (d *Device) rcFailAt(x *qp, psn uint32, status uint32) {
	for _, t := range x.rc.tx {
		if t.done || t.npsn == 0 {
			continue
		}
		d.completeTxError(x, t, status)
		return
	}
}

func (d *Device) rcReadResponse(x *qp, pkt *rxPkt) {
	var t *txWQE
	for _, c := range x.rc.tx {
		if c.done || c.npsn == 0 {
			continue
		}
		if c.w.Opcode == uverbs.OpRDMARead && c.next > 0 && roce.PSNInRange(pkt.psn, c.first, c.last()) {
			t = c
		}
		break
	}
	if t == nil {
		return
	}
	if want := roce.PSNAdd(t.first, int(t.resp)); pkt.psn != want {
		// A response past a gap: the ones before it were lost. Ask again
		// from the first missing one at once (once per gap), as rxe does,
		// instead of waiting for the timer.
		if roce.PSNDiff(pkt.psn, want) > 0 && t.gap != t.resp+1 {
			t.gap = t.resp + 1
			d.rcRewind(x, want)
		}
		return
	}
	op := pkt.p.Opcode()
	wantFirst := t.resp == 0
	isFirst := op == roce.RCRDMAReadResponseFirst || op == roce.RCRDMAReadResponseOnly
	isLast := op == roce.RCRDMAReadResponseLast || op == roce.RCRDMAReadResponseOnly
	pm := uint32(x.pmtu())
	off := t.resp * pm
	want := min(pm, t.length-min(off, t.length))
	if wantFirst != isFirst || isLast != (t.resp+1 == t.npsn) || uint32(len(pkt.p.Payload)) != want {
		d.completeTxError(x, t, uverbs.WCBadRespErr)
		return
	}
	if want > 0 {
		if err := d.copySegs(t.segs, uint64(off), pkt.p.Payload, true); err != nil {
			d.completeTxError(x, t, uverbs.WCLocProtErr)
			return
		}
	}
	t.resp++
	// The response implicitly acknowledges everything before the READ.
	d.rcAcked(x, roce.PSNAdd(t.first, -1), true)
	x.rc.retries = x.attr.RetryCnt
	if isLast {
		t.done = true
		d.rcAcked(x, t.last(), true)
	}
}

// localOp executes LOCAL_INV and FAST_REG_MR.
func (d *Device) localOp(x *qp, w *uverbs.SendWQE) uint32 {
	switch w.Opcode {
	case uverbs.OpLocalInv:
		m := d.lookupKeyAny(w.InvalidateRKey())
		if m == nil || !m.frmr || m.pd != x.pd {
			return uverbs.WCLocProtErr
		}
		m.valid = false
	case uverbs.OpFastRegMR:
		fr := w.FastReg()
		m := d.res.mr.get(fr.RKey >> 8)
		if m == nil || !m.frmr || m.pd != x.pd || m.valid {
			return uverbs.WCLocProtErr
		}
		if fr.PageShift != 12 || fr.PageListLen == 0 || fr.PageListLen > m.maxPages ||
			fr.Access&^accKnown != 0 || uint64(fr.Length) > uint64(fr.PageListLen)*dma.PageSize {
			return uverbs.WCLocProtErr
		}
		if _, ok := dma.End(fr.IOVA, uint64(fr.Length)); !ok {
			return uverbs.WCLocProtErr
		}
		pages, err := dma.ReadPageDir(d.mem, fr.PageListDir, fr.PageListLen, m.maxPages)
		if err != nil {
			return uverbs.WCLocProtErr
		}
		if e := d.res.pin(uint32(len(pages))); e != nil {
			return uverbs.WCLocProtErr
		}
		d.res.unpin(len(m.pages))
		m.pages, m.start, m.length, m.access = pages, fr.IOVA, uint64(fr.Length), fr.Access
		m.lkey, m.rkey, m.valid = fr.RKey, fr.RKey, true
	}
	return uverbs.WCSuccess
}

// lookupKeyAny finds a valid or invalid MR by key (invalidation).
func (d *Device) lookupKeyAny(key uint32) *mr {
	m := d.res.mr.get(key >> 8)
	if m == nil || (m.rkey != key && m.lkey != key) {
		return nil
	}
	return m
}

// ---- responder ---------------------------------------------------------------

// recvRC handles every RC packet for QP x.
func (d *Device) recvRC(x *qp, pkt *rxPkt) {
	op := pkt.p.Opcode()
	info, _ := op.Info()
	if info.Response {
		d.rcResponse(x, pkt)
		return
	}
	if x.state != StateRTR && x.state != StateRTS && x.state != StateSQD {
		return
	}
	diff := roce.PSNDiff(pkt.psn, x.rc.ePSN)
	switch {
	case diff > 0:
		if !x.rc.nakSent {
			x.rc.nakSent = true
			d.rcSendAck(x, x.rc.ePSN, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		}
		return
	case diff < 0:
		d.rcDuplicate(x, pkt)
		return
	}
	x.rc.nakSent = false
	d.rcExecute(x, pkt)
}

// rcFields starts the fields of a packet to the QP's peer.
func rcFields(x *qp, op roce.Opcode, psn uint32) roce.PacketFields {
	f := roce.PacketFields{}
	f.BTH.Opcode = op
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = x.attr.DestQPN
	f.BTH.PSN = psn
	return f
}

// rcSendAck sends an ACK or NAK with the current MSN, after any responses
// still queued.
func (d *Device) rcSendAck(x *qp, psn uint32, syn roce.Syndrome) {
	d.rcRespond(x, respItem{kind: respAck, psn: psn, syn: syn})
}

// rcRespond sends a response now, or queues it behind the ones waiting.
//
// The queue is bounded, whatever the peer sends while a long READ stream is
// queued: an ACK replaces a queued ACK at the tail (ACKs are cumulative),
// and beyond maxQueuedResponses a response is dropped (the requester's
// retry asks again).
func (d *Device) rcRespond(x *qp, it respItem) {
	out := x.rc.out
	switch {
	case len(out) > 1 && it.kind == respAck && out[len(out)-1].kind == respAck:
		out[len(out)-1] = it
		return
	case len(out) >= maxQueuedResponses:
		return
	}
	x.rc.out = append(out, it)
	if len(x.rc.out) == 1 {
		d.rcFlushOut(x)
	}
}

// rcFlushOut sends queued responses in order: at most respBatch READ
// response packets per call; the engine is kicked to go on (later, when the
// requester's queue is full).
func (d *Device) rcFlushOut(x *qp) {
	budget := respBatch
	for len(x.rc.out) > 0 {
		it := &x.rc.out[0]
		var err error
		switch it.kind {
		case respAck:
			err = d.rcSendAckNow(x, it.psn, it.syn)
		case respAtomic:
			err = d.rcAtomicAck(x, &it.res)
		case respRead:
			for err == nil && it.next < it.res.count() && budget > 0 {
				if err = d.rcReadPacket(x, &it.res, it.next); err == nil {
					it.next++
					budget--
				}
			}
			if err == nil && it.next < it.res.count() {
				d.eng.kick(kickQP, x.handle, kickResp)
				return
			}
		}
		if errors.Is(err, errPeerBusy) {
			d.eng.kickLater(x.handle, kickResp)
			return
		}
		x.rc.out = x.rc.out[1:]
	}
	x.rc.out = nil
}

// rcSendAckNow sends an ACK or NAK with the current MSN.
func (d *Device) rcSendAckNow(x *qp, psn uint32, syn roce.Syndrome) error {
	p, ok := d.rcPath(x)
	if !ok {
		return nil
	}
	f := rcFields(x, roce.RCAcknowledge, psn)
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: x.rc.msn}
	return d.transmit(&p, &f, 0, nil)
}

// rcNAK sends a class-C NAK (at once: the QP stops here) and moves the QP
// to ERR.
func (d *Device) rcNAK(x *qp, psn uint32, code roce.NAKCode, ev uint32) {
	d.rcSendAckNow(x, psn, roce.NAKSyndrome(code))
	d.qpError(x, ev)
}

func isSendOp(op roce.Opcode) bool {
	return op <= roce.RCSendOnlyWithImmediate || op == roce.RCSendLastWithInvalidate || op == roce.RCSendOnlyWithInvalidate
}

func isWriteOp(op roce.Opcode) bool {
	return op >= roce.RCRDMAWriteFirst && op <= roce.RCRDMAWriteOnlyWithImmediate
}

// rcExecute runs the validation pipeline (rocev2.md §4.2) and executes an
// in-order request packet.
func (d *Device) rcExecute(x *qp, pkt *rxPkt) {
	op := pkt.p.Opcode()
	info, _ := op.Info()
	psn := pkt.psn
	first := info.Pos == roce.PosFirst || info.Pos == roce.PosOnly
	last := info.Pos == roce.PosLast || info.Pos == roce.PosOnly
	// 1. Opcode sequence.
	switch {
	case isSendOp(op):
		if x.rc.inWrite || (x.rc.inSend && first) || (!x.rc.inSend && !first) {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	case isWriteOp(op):
		if x.rc.inSend || (x.rc.inWrite && first) || (!x.rc.inWrite && !first) {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	default:
		if x.rc.inSend || x.rc.inWrite {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	}
	// 2, 3. QP access flags and responder resources.
	acc := x.attr.AccessFlags
	switch {
	case op == roce.RCRDMAReadRequest:
		if acc&accRemoteRead == 0 || x.attr.MaxDestRdAtomic == 0 {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		if acc&accRemoteAtomic == 0 || x.attr.MaxDestRdAtomic == 0 {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	case isWriteOp(op) && first:
		if acc&accRemoteWrite == 0 {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
	}
	// 4. A receive WQE for RQ-consuming packets.
	needRQ := (isSendOp(op) && first) || (last && (op == roce.RCRDMAWriteLastWithImmediate || op == roce.RCRDMAWriteOnlyWithImmediate))
	var r recvWQE
	if needRQ {
		var st uint32
		var ok bool
		r, st, ok = d.peekRecv(x)
		if !ok {
			d.rcSendAck(x, psn, roce.RNRNAKSyndrome(x.attr.MinRNRTimer))
			return
		}
		if st != uverbs.WCSuccess {
			d.popRecv(x)
			d.completeRecv(x, &uverbs.CQE{WRID: r.w.WRID, Opcode: uverbs.WCRecv, Status: uverbs.WCLocQPOpErr}, false)
			d.rcNAK(x, psn, roce.NAKRemoteOperationalErr, EvQPFatal)
			return
		}
	}
	// 5. Lengths.
	pm := x.pmtu()
	if roce.CheckPayloadLen(op, len(pkt.p.Payload), pm) != nil {
		d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
		return
	}
	payload := pkt.p.Payload
	switch {
	case isSendOp(op):
		if first {
			d.popRecv(x)
			rw := r
			x.rc.rwqe, x.rc.rOff, x.rc.inSend = &rw, 0, true
		}
		rw := x.rc.rwqe
		if x.rc.rOff+uint64(len(payload)) > uint64(rw.cap) {
			// 9. Larger than the receive buffers.
			x.rc.rwqe, x.rc.inSend = nil, false
			d.completeRecv(x, &uverbs.CQE{WRID: rw.w.WRID, Opcode: uverbs.WCRecv, Status: uverbs.WCLocLenErr}, false)
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
		if err := d.copySegs(rw.segs, x.rc.rOff, payload, true); err != nil {
			x.rc.rwqe, x.rc.inSend = nil, false
			d.completeRecv(x, &uverbs.CQE{WRID: rw.w.WRID, Opcode: uverbs.WCRecv, Status: uverbs.WCLocProtErr}, false)
			d.rcNAK(x, psn, roce.NAKRemoteOperationalErr, EvQPAccessErr)
			return
		}
		x.rc.rOff += uint64(len(payload))
		if last {
			x.rc.rwqe, x.rc.inSend = nil, false
			e := uverbs.CQE{WRID: rw.w.WRID, Opcode: uverbs.WCRecv, ByteLen: uint32(x.rc.rOff)}
			if pkt.p.ImmDt != nil {
				copy(e.ImmData[:], pkt.p.ImmDt)
				e.WCFlags |= uverbs.WCFlagImm
			}
			if pkt.p.IETH != nil {
				key := pkt.p.IETH.RKey()
				m := d.lookupKeyAny(key)
				if m == nil || !m.frmr || m.pd != x.pd {
					e.Status = uverbs.WCRemInvReqErr
					d.completeRecv(x, &e, false)
					d.qpError(x, EvQPReqErr)
					return
				}
				m.valid = false
				binary.LittleEndian.PutUint32(e.ImmData[:], key)
				e.WCFlags |= uverbs.WCFlagInvalidate
			}
			x.rc.msn = roce.PSNAdd(x.rc.msn, 1)
			d.completeRecv(x, &e, pkt.p.BTH.SE())
		}
	case isWriteOp(op):
		if first {
			reth := pkt.p.RETH
			va, key, n := reth.VA(), reth.RKey(), uint64(reth.DMALength())
			if n > maxRDMAMessage {
				d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
				return
			}
			var m *mr
			if n > 0 {
				if m = d.rkeyMR(x, key, va, n, accRemoteWrite); m == nil {
					d.rcNAK(x, psn, roce.NAKRemoteAccessError, EvQPAccessErr)
					return
				}
			}
			x.rc.wMR, x.rc.wVA, x.rc.wRem, x.rc.inWrite = m, va, n, true
			x.rc.writeLen = uint32(n)
		}
		// 7. Payload against the RETH length.
		n := uint64(len(payload))
		if n > x.rc.wRem || (!last && n != uint64(pm)) || (last && n != x.rc.wRem) {
			x.rc.inWrite = false
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
		if n > 0 {
			if err := d.mrWrite(x.rc.wMR, x.rc.wVA, payload); err != nil {
				x.rc.inWrite = false
				d.rcNAK(x, psn, roce.NAKRemoteOperationalErr, EvQPFatal)
				return
			}
		}
		x.rc.wVA += n
		x.rc.wRem -= n
		if last {
			x.rc.inWrite = false
			x.rc.msn = roce.PSNAdd(x.rc.msn, 1)
			if needRQ {
				d.popRecv(x)
				e := uverbs.CQE{WRID: r.w.WRID, Opcode: uverbs.WCRecvRDMAImm, ByteLen: x.rc.writeLen}
				copy(e.ImmData[:], pkt.p.ImmDt)
				e.WCFlags |= uverbs.WCFlagImm
				d.completeRecv(x, &e, pkt.p.BTH.SE())
			}
		}
	case op == roce.RCRDMAReadRequest:
		reth := pkt.p.RETH
		va, key, n := reth.VA(), reth.RKey(), reth.DMALength()
		if uint64(n) > maxRDMAMessage {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
		if n > 0 && d.rkeyMR(x, key, va, uint64(n), accRemoteRead) == nil {
			d.rcNAK(x, psn, roce.NAKRemoteAccessError, EvQPAccessErr)
			return
		}
		cnt := max(1, (n+uint32(pm)-1)/uint32(pm))
		res := d.rcNewRes(x)
		*res = rdRes{valid: true, first: psn, last: roce.PSNAdd(psn, int(cnt)-1), va: va, rkey: key, length: n}
		x.rc.msn = roce.PSNAdd(x.rc.msn, 1)
		x.rc.ePSN = roce.PSNAdd(psn, int(cnt))
		d.rcReadRespond(x, res, psn)
		return
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		a := pkt.p.AtomicETH
		va, key := a.VA(), a.RKey()
		if va%8 != 0 {
			d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
			return
		}
		m := d.rkeyMR(x, key, va, 8, accRemoteAtomic)
		if m == nil {
			d.rcNAK(x, psn, roce.NAKRemoteAccessError, EvQPAccessErr)
			return
		}
		orig, err := d.mrAtomic(m, va, op == roce.RCCompareSwap, a.Compare(), a.SwapAdd())
		if err != nil {
			d.rcNAK(x, psn, roce.NAKRemoteOperationalErr, EvQPFatal)
			return
		}
		res := d.rcNewRes(x)
		*res = rdRes{valid: true, atomic: true, first: psn, last: psn, va: va, rkey: key, length: 8, orig: orig}
		x.rc.msn = roce.PSNAdd(x.rc.msn, 1)
		x.rc.ePSN = roce.PSNAdd(psn, 1)
		d.rcRespond(x, respItem{kind: respAtomic, res: *res})
		return
	default:
		d.rcNAK(x, psn, roce.NAKInvalidRequest, EvQPReqErr)
		return
	}
	x.rc.ePSN = roce.PSNAdd(psn, 1)
	if pkt.p.BTH.AckReq() {
		d.rcSendAck(x, psn, roce.SyndromeACKNoCredit)
	}
}

// rcNewRes recycles the oldest responder resource.
func (d *Device) rcNewRes(x *qp) *rdRes {
	r := &x.rc.res[x.rc.resNext]
	x.rc.resNext = (x.rc.resNext + 1) % rcResources
	return r
}

// rkeyMR checks an R_Key: an MR of the QP's PD granting access and covering
// [va, va+n).
func (d *Device) rkeyMR(x *qp, key uint32, va, n uint64, access uint32) *mr {
	m := d.lookupKey(key, true)
	if m == nil || m.pd != x.pd || m.access&access == 0 || !m.inRange(va, n) {
		return nil
	}
	return m
}

func (d *Device) mrWrite(m *mr, va uint64, b []byte) error {
	return d.span(m, va, uint64(len(b)), func(gpa, n, done uint64) error {
		return d.mem.WriteAt(b[done:done+n], gpa)
	})
}

func (d *Device) mrRead(m *mr, va uint64, b []byte) error {
	return d.span(m, va, uint64(len(b)), func(gpa, n, done uint64) error {
		return d.mem.ReadAt(b[done:done+n], gpa)
	})
}

// mrAtomic performs a 64-bit compare-and-swap or fetch-and-add at va and
// returns the original value.
func (d *Device) mrAtomic(m *mr, va uint64, cas bool, compare, swapAdd uint64) (orig uint64, err error) {
	err = d.span(m, va, 8, func(gpa, n, _ uint64) error {
		if n != 8 {
			return dma.Fault(gpa, 8, "atomic target crosses a page")
		}
		return d.mem.Access(gpa, 8, true, func(b []byte) {
			p := (*uint64)(unsafe.Pointer(&b[0]))
			for {
				orig = atomic.LoadUint64(p)
				nv := orig + swapAdd
				if cas {
					if orig != compare {
						return
					}
					nv = swapAdd
				}
				if atomic.CompareAndSwapUint64(p, orig, nv) {
					return
				}
			}
		})
	})
	return orig, err
}

// rcReadRespond queues the READ responses of resource r from PSN from on
// (a duplicate READ restarts a stream still queued).
func (d *Device) rcReadRespond(x *qp, r *rdRes, from uint32) {
	next := uint32(roce.PSNDiff(from, r.first))
	for i := range x.rc.out {
		if it := &x.rc.out[i]; it.kind == respRead && it.res.first == r.first {
			it.next = min(it.next, next)
			return
		}
	}
	d.rcRespond(x, respItem{kind: respRead, res: *r, next: next})
}

// count is the number of response packets of a READ resource.
func (r *rdRes) count() uint32 { return uint32(roce.PSNDiff(r.last, r.first)) + 1 }

// rcReadPacket sends READ response packet i of resource r.
func (d *Device) rcReadPacket(x *qp, r *rdRes, i uint32) error {
	p, ok := d.rcPath(x)
	if !ok {
		return nil
	}
	pm := uint32(x.pmtu())
	cnt := r.count()
	f := rcFields(x, 0, roce.PSNAdd(r.first, int(i)))
	switch position(i, cnt) {
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
		f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: x.rc.msn}
	}
	off := i * pm
	n := min(pm, r.length-min(off, r.length))
	var gather func([]byte) error
	if n > 0 {
		m := d.lookupKey(r.rkey, true)
		if m == nil {
			return nil // invalidated since: the requester will time out
		}
		va := r.va + uint64(off)
		gather = func(b []byte) error { return d.mrRead(m, va, b) }
	}
	err := d.transmit(&p, &f, int(n), gather)
	if err != nil && !errors.Is(err, errPeerBusy) {
		d.log.Debug("READ response failed", "qp", x.handle, "err", err)
		return nil
	}
	return err
}

func (d *Device) rcAtomicAck(x *qp, r *rdRes) error {
	p, ok := d.rcPath(x)
	if !ok {
		return nil
	}
	f := rcFields(x, roce.RCAtomicAcknowledge, r.first)
	f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: x.rc.msn}
	f.AtomicAckETH = r.orig
	return d.transmit(&p, &f, 0, nil)
}

// rcDuplicate answers a duplicate request (rocev2.md §4.6).
func (d *Device) rcDuplicate(x *qp, pkt *rxPkt) {
	op := pkt.p.Opcode()
	switch {
	case op == roce.RCRDMAReadRequest:
		reth := pkt.p.RETH
		for i := range x.rc.res {
			r := &x.rc.res[i]
			if r.valid && !r.atomic && roce.PSNInRange(pkt.psn, r.first, r.last) && r.rkey == reth.RKey() {
				end, ok := dma.End(reth.VA(), uint64(reth.DMALength()))
				if ok && reth.VA() >= r.va && end <= r.va+uint64(r.length) {
					d.rcReadRespond(x, r, pkt.psn)
				}
				return
			}
		}
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		for i := range x.rc.res {
			r := &x.rc.res[i]
			if r.valid && r.atomic && r.first == pkt.psn {
				d.rcRespond(x, respItem{kind: respAtomic, res: *r})
				return
			}
		}
	default:
		d.rcSendAck(x, roce.PSNAdd(x.rc.ePSN, -1), roce.SyndromeACKNoCredit)
	}
}
