package pvrdma_test

import (
	"encoding/json"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestInspect: the snapshot shows the objects the driver made, with the
// values it gave them and the connection's progress.
func TestInspect(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, 1|4) // LOCAL_WRITE|REMOTE_READ
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 3000, LKey: lkA}))
	if e := poll(t, a.cq, a, b); e.Status != 0 {
		t.Fatalf("send: %+v", e)
	}
	poll(t, b.cq, a, b)

	st := a.dev.Inspect()
	if st.Device != "hca1" || !st.Active || st.Fatal || st.Port.State != "ACTIVE" || st.Port.MAC != "00:50:56:00:00:01" {
		t.Errorf("device %+v", st)
	}
	if len(st.GIDs) != 2 || st.GIDs[1].GID != "::ffff:10.0.0.1" {
		t.Errorf("GIDs %+v", st.GIDs)
	}
	var qp *pvrdma.QPState
	for i := range st.QPs {
		if st.QPs[i].Handle == qa.Handle {
			qp = &st.QPs[i]
		}
	}
	if qp == nil {
		t.Fatalf("QP %d not in %+v", qa.Handle, st.QPs)
	}
	sqpsn := 0x100 + qa.QPN // connect's send PSN
	if qp.QPN != qa.QPN || qp.Type != "RC" || qp.State != "RTS" || qp.DestQPN != qb.QPN || qp.Peer != "::ffff:10.0.0.2" ||
		qp.PathMTU != 1024 || qp.SQPSN != sqpsn || qp.RetryCnt != 7 {
		t.Errorf("QP %+v", qp)
	}
	// 3000 bytes at PMTU 1024: three packets, all acknowledged.
	if qp.RC == nil || qp.RC.NextPSN != sqpsn+3 || qp.RC.UnackedPSN != sqpsn+3 || qp.RC.Outstanding != 0 {
		t.Errorf("RC progress %+v", qp.RC)
	}
	if qp.SQ.Entries != 64 || qp.SQ.Prod != 1 || qp.SQ.Cons != 1 || qp.RQ == nil || qp.RQ.Entries != 64 {
		t.Errorf("rings SQ %+v RQ %+v", qp.SQ, qp.RQ)
	}
	bst := b.dev.Inspect()
	var peer *pvrdma.QPState
	for i := range bst.QPs {
		if bst.QPs[i].Handle == qb.Handle {
			peer = &bst.QPs[i]
		}
	}
	if peer == nil || peer.RC == nil || peer.RC.ExpectedPSN != sqpsn+3 || peer.RC.MSN != 1 || peer.RQ.Cons != 1 {
		t.Errorf("responder %+v", peer)
	}
	var found bool
	for _, m := range bst.MRs {
		if m.LKey == lkB {
			found = true
			if m.Kind != "user" || m.Access != "LOCAL_WRITE|REMOTE_READ" || m.Start != dst || m.Length != 4096 || m.PD != b.pd {
				t.Errorf("MR %+v", m)
			}
		}
	}
	if !found {
		t.Errorf("MR %#x not in %+v", lkB, bst.MRs)
	}
	if len(st.CQs) == 0 || st.CQs[0].Ring.Prod != 1 || st.CQs[0].Ring.Cons != 1 {
		t.Errorf("CQs %+v", st.CQs)
	}
	for _, p := range st.PDs {
		if p.Handle == a.pd && p.Users < 3 { // two MRs (DMA, user) and the QP
			t.Errorf("PD %+v", p)
		}
	}
	if _, err := json.Marshal(st); err != nil {
		t.Error(err)
	}
	// Strict-mode findings show by kind.
	a.Doorbell(0, 0, 999|1<<30)
	if got := a.dev.Inspect().Findings; got["doorbell"] != 1 {
		t.Errorf("findings %v", got)
	}
}
