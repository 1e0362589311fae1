package pvrdma_test

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// dropNth is a link decorator that loses the nth frame (1-based) sent after
// it is armed, and only that one.
type dropNth struct {
	mu    sync.Mutex
	armed bool
	n     int
	seen  int
	lost  atomic.Int64
}

func (d *dropNth) arm(n int) {
	d.mu.Lock()
	d.armed, d.n, d.seen = true, n, 0
	d.mu.Unlock()
}

func (d *dropNth) decorator(next fabric.Link) fabric.Link {
	return fabric.LinkFunc(func(from *fabric.Port, frame []byte) bool {
		d.mu.Lock()
		lose := false
		if d.armed {
			d.seen++
			if d.seen == d.n {
				lose, d.armed = true, false
			}
		}
		d.mu.Unlock()
		if lose {
			d.lost.Add(1)
			fabric.Release(frame)
			return true
		}
		return next.Send(from, frame)
	})
}

// qpStats returns the counters of QP qpn of host h.
func qpStats(t *testing.T, h *host, qpn uint32) hca.QPStats {
	t.Helper()
	h.dev.Sync()
	_, qps := h.dev.Stats()
	st, ok := qps[qpn]
	if !ok {
		t.Fatalf("no counters for QP %#x", qpn)
	}
	return st
}

// TestStats: the counters against exchanges whose every packet is known:
// five SENDs of 3000 bytes (three packets each at PMTU 1024); one lost
// middle packet (the responder drops the next as out of sequence and NAKs
// once, the requester resends two); one lost last packet (a timeout, the
// message resent, two duplicates); an RNR NAK (one sent, one received, one resend). Device totals
// keep a destroyed QP's counts, and the log says what a destroyed QP
// retransmitted; commands are counted by outcome.
func TestStats(t *testing.T) {
	checkGoroutines(t)
	drop := &dropNth{}
	sw := fabric.NewSwitch(drop.decorator)
	var logA syncBuffer
	a := newHostConfig(t, sw, 1, 64<<20, func(c *pvrdma.Config) {
		c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&logA, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	b := newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	o := defaultRC()
	// 1.07 s: the lost last packet waits one timeout; the exact counts below
	// need no spurious timeout, so a loaded machine must not stall the
	// exchange that long.
	o.timeout = 18
	qa, qb := pairRC(t, a, b, o, o)
	sendOnce := func(id uint64) {
		t.Helper()
		qb.PostRecv(uverbs.RecvWQE{WRID: id, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, id, 0, uverbs.SGE{Addr: src, Length: 3000, LKey: lkA}))
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("send %d: %+v", id, e)
		}
		if e := poll(t, b.cq, a, b); e.Status != 0 || e.ByteLen != 3000 {
			t.Fatalf("receive %d: %+v", id, e)
		}
	}
	for id := uint64(1); id <= 5; id++ {
		sendOnce(id)
	}
	sa, sb := qpStats(t, a, qa.QPN), qpStats(t, b, qb.QPN)
	// One ACK per message (AckReq on its last packet).
	if diff := cmp.Diff(hca.QPStats{PacketsSent: 15, BytesSent: 15000, PacketsReceived: 5}, sa); diff != "" {
		t.Errorf("requester after 5 SENDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(hca.QPStats{PacketsSent: 5, PacketsReceived: 15, BytesReceived: 15000}, sb); diff != "" {
		t.Errorf("responder after 5 SENDs (-want +got):\n%s", diff)
	}

	// Lose the MIDDLE: LAST arrives out of sequence (dropped, one NAK),
	// the requester resends MIDDLE and LAST.
	drop.arm(2)
	sendOnce(6)
	da, db := qpStats(t, a, qa.QPN), qpStats(t, b, qb.QPN)
	if da.Retransmitted != 2 || da.NAKsReceived.PSNSequence != 1 || da.Timeouts != 0 ||
		db.OutOfSequence != 1 || db.NAKsSent.PSNSequence != 1 || db.PacketsReceived != sb.PacketsReceived+4 {
		t.Errorf("lost middle packet: requester %+v, responder %+v", da, db)
	}
	// Lose the LAST: nothing follows it; the timer resends the message
	// from its first unacknowledged PSN (FIRST and MIDDLE arrived but were
	// not acknowledged: no AckReq on them), so the responder sees two
	// duplicates and the LAST.
	drop.arm(3)
	sendOnce(7)
	ea, eb := qpStats(t, a, qa.QPN), qpStats(t, b, qb.QPN)
	if ea.Retransmitted != da.Retransmitted+3 || ea.Timeouts != 1 || eb.OutOfSequence != db.OutOfSequence ||
		eb.Duplicates != db.Duplicates+2 {
		t.Errorf("lost last packet: requester %+v, responder %+v", ea, eb)
	}
	if drop.lost.Load() != 2 {
		t.Fatalf("%d frames lost, want 2", drop.lost.Load())
	}

	// No receive posted: RNR NAKs until it is; each is resent once.
	qa.PostSend(send(uverbs.OpSend, 8, 0, uverbs.SGE{Addr: src, Length: 100, LKey: lkA}))
	waitFor(t, "an RNR NAK", func() bool { return qpStats(t, b, qb.QPN).RNRNAKsSent > 0 }, a, b)
	qb.PostRecv(uverbs.RecvWQE{WRID: 8, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	poll(t, a.cq, a, b)
	poll(t, b.cq, a, b)
	fa, fb := qpStats(t, a, qa.QPN), qpStats(t, b, qb.QPN)
	if fb.RNRNAKsSent == 0 || fa.RNRNAKsReceived != fb.RNRNAKsSent || fa.Retransmitted != ea.Retransmitted+fa.RNRNAKsReceived {
		t.Errorf("RNR: requester %+v, responder %+v", fa, fb)
	}

	// The device: its port saw every frame; the QP totals survive the QP.
	devA, _ := a.dev.Stats()
	if devA.QPs.PacketsSent != fa.PacketsSent || devA.Port.FramesOut != fa.PacketsSent || devA.Port.FramesIn != fa.PacketsReceived {
		t.Errorf("device A %+v; QP %+v", devA, fa)
	}
	if err := a.MustCmd(&abi.CmdDestroyQP{QPHandle: qa.Handle}, &abi.CmdDestroyQPResp{}); err != nil {
		t.Fatal(err)
	}
	a.MustCmd(&abi.CmdDestroyQP{QPHandle: qa.Handle}, &abi.CmdDestroyQPResp{}) // again: EINVAL
	retired := fmt.Sprintf(`msg="QP retransmitted" dev=hca1 qpn=%#x retransmitted=%d timeouts=1 psn_sequence_naks=1 rnr_naks=%d`,
		qa.QPN, fa.Retransmitted, fa.RNRNAKsReceived)
	if !strings.Contains(logA.String(), retired) {
		t.Errorf("the log lacks %s", retired)
	}
	after, qps := a.dev.Stats()
	if len(qps) != 0 && qps[qa.QPN] != (hca.QPStats{}) {
		t.Errorf("destroyed QP still counted: %+v", qps)
	}
	if diff := cmp.Diff(devA.QPs, after.QPs); diff != "" {
		t.Errorf("device QP totals changed by DESTROY_QP (-before +after):\n%s", diff)
	}
	counts := map[string]uint64{}
	for _, c := range after.Commands {
		counts[c.Command+"/"+itoa(c.Errno)] = c.Count
	}
	if counts["DESTROY_QP/0"] != 1 || counts["DESTROY_QP/22"] != 1 || counts["CREATE_QP/0"] < 1 || counts["MODIFY_QP/0"] < 3 {
		t.Errorf("commands %v", counts)
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// waitFor polls cond (bounded), letting every device run.
func waitFor(t *testing.T, what string, cond func() bool, hosts ...*host) {
	t.Helper()
	verbstest.WaitFor(t, what, func() bool {
		if cond() {
			return true
		}
		for _, h := range hosts {
			h.dev.Sync()
		}
		return false
	})
}

// TestLostEntriesCounted: what the device drops for want of room shows in
// its stats (and so in inspect and the metrics): frames its full receive
// queue refused, async events and CQ notifications the driver's broken
// rings could not take. Each was counted nowhere before.
func TestLostEntriesCounted(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a := newHost(t, sw, 1)

	// The engine is held under the device lock, so its queue fills.
	refused := 0
	a.dev.WithLock(func() {
		for i := 0; i < pvrdma.RxQueue+1024; i++ {
			if !a.dev.Receive(fabric.NewFrame()[:64]) {
				refused++
			}
		}
	})
	a.dev.Sync()
	st, _ := a.dev.Stats()
	if refused == 0 || st.Port.RxQueueFull != uint64(refused) {
		t.Errorf("%d frames refused, stats say dropped_rx_queue_full %d", refused, st.Port.RxQueueFull)
	}

	// The driver corrupts both rings' consumer indexes: the CQ notification
	// of an armed CQ and the CQ_ERR of its overrun are lost, and counted.
	a.Put32(a.AsyncRing[0]+uverbs.RxConsHead, 0xFFFF_FFF0)
	a.Put32(a.CQRing[0]+uverbs.RxConsHead, 0xFFFF_FFF0)
	src, lk, _ := a.mr(t, 4096, allAccess)
	cq, err := a.CreateCQ(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	cq.Arm(false)
	q := a.readyUD(t, cq)
	for i := 0; i < 5; i++ { // the guest never polls
		q.PostSend(udSendTo9(uint64(i), uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
	}
	for i := 0; i < 3; i++ {
		a.dev.Sync()
	}
	// The CQ stays armed while its notification cannot be posted, so each
	// of its 4 CQEs tries once.
	st, _ = a.dev.Stats()
	if st.EventsLost != 1 || st.CQNotificationsLost != 4 {
		t.Errorf("async_events_lost %d, cq_notifications_lost %d: want 1 (CQ_ERR) and 4 (one per CQE of the armed CQ)", st.EventsLost, st.CQNotificationsLost)
	}
}
