package mlx5

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// traceLog is a tracer that keeps every event.
type traceLog struct {
	mu  sync.Mutex
	evs []hca.TraceEvent
}

func (l *traceLog) Trace(ev *hca.TraceEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, *ev)
}

func (l *traceLog) events() []hca.TraceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hca.TraceEvent(nil), l.evs...)
}

// TestObserve: what hcaemu inspect, trace and the metrics get of a device
// after an RC exchange: the port with its LID, the EQs, PDs, mkeys, CQs
// and QPs (state, type, QPN, LIDs), every section printed; the commands
// counted by opcode, the packets and QP counters; trace events for
// commands, packets, completions and state changes, stamped with the
// device's name.
func TestObserve(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	tr := &traceLog{}
	a.d.SetTracer(tr)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	exchange(t, a, b)

	var obs hca.Observed = a.d
	if obs.Name() != "hca0" || obs.Model() != "mlx5" {
		t.Errorf("name %q model %q", obs.Name(), obs.Model())
	}
	st := a.d.Inspect()
	if st.Function != "initialized" || st.Fatal || st.Port.State != "ACTIVE" || st.Port.LID != a.lid || st.Port.SMLID != 1 ||
		!strings.HasPrefix(st.Port.GID, "fe80:0000:0000:0000:0002:c903:0000:0101") {
		t.Errorf("device %+v port %+v", st.Function, st.Port)
	}
	if len(st.EQs) < 3 || len(st.PDs) == 0 || len(st.Mkeys) == 0 || len(st.CQs) == 0 || len(st.SRQs) == 0 {
		t.Errorf("objects: %d EQs, %d PDs, %d mkeys, %d CQs, %d SRQs", len(st.EQs), len(st.PDs), len(st.Mkeys), len(st.CQs), len(st.SRQs))
	}
	var rcQP *QPState
	for i, q := range st.QPs {
		if q.QPN == a.wq.Q.QPN {
			rcQP = &st.QPs[i]
		}
	}
	if rcQP == nil || rcQP.Type != "RC" || rcQP.State != "RTS" || rcQP.LID != a.lid || rcQP.RemoteLID != b.lid ||
		rcQP.DestQPN != b.wq.Q.QPN || rcQP.PathMTU != 1024 || rcQP.RC == nil || rcQP.Stats.PacketsSent == 0 {
		t.Errorf("RC QP %+v", rcQP)
	}
	for _, what := range []string{"devices", "ports", "gids", "pds", "mrs", "cqs", "qps", "srqs", "eqs", "stats"} {
		if secs := st.Sections(); !func() bool { _, ok := secs.Get(what); return ok }() {
			t.Errorf("no section %s", what)
		}
		var w bytes.Buffer
		st.Print(&w, what)
		if w.Len() == 0 {
			t.Errorf("section %s prints nothing", what)
		}
	}
	var w bytes.Buffer
	st.Print(&w, "qps")
	if !strings.Contains(w.String(), "RC RTS") || !strings.Contains(w.String(), "remote lid") {
		t.Errorf("inspect qps:\n%s", w.String())
	}
	if secs := st.Sections(); func() bool { _, ok := secs.Get("bogus"); return ok }() {
		t.Error("a section bogus")
	}

	cs, qps := obs.CoreStats()
	if cs.Port.FramesOut == 0 || cs.Port.FramesIn == 0 || qps[a.wq.Q.QPN].PacketsSent == 0 || cs.QPs.PacketsSent < qps[a.wq.Q.QPN].PacketsSent {
		t.Errorf("core stats %+v, qp %+v", cs.Port, qps[a.wq.Q.QPN])
	}
	cmds := map[string]uint64{}
	for _, c := range cs.Commands {
		if c.Errno == 0 {
			cmds[c.Command] = c.Count
		}
	}
	if cmds["CREATE_QP"] == 0 || cmds["INIT2RTR_QP"] == 0 || cmds["ENABLE_HCA"] != 1 {
		t.Errorf("commands %v", cmds)
	}
	names := map[string]uint64{}
	for _, m := range obs.ModelStats() {
		names[m.Name] = m.Value
	}
	if names["commands"] == 0 || names["cqes"] == 0 || len(names) < 10 {
		t.Errorf("model stats %v", names)
	}

	kinds := map[string]int{}
	for _, ev := range tr.events() {
		kinds[ev.Event]++
		if ev.Device != "hca0" || ev.Time.IsZero() {
			t.Fatalf("event %+v not stamped", ev)
		}
		if ev.Event == "command" && (ev.Command == "" || ev.Status != ifc.StatOK.String()) {
			t.Errorf("command event %+v", ev)
		}
	}
	for _, k := range []string{"command", "tx", "rx", "cqe", "state"} {
		if kinds[k] == 0 {
			t.Errorf("no %s event: %v", k, kinds)
		}
	}
	a.d.SetTracer(nil)
	n := len(tr.events())
	sendOne(a, b)
	a.poll(t)
	b.poll(t)
	if len(tr.events()) != n {
		t.Error("events after SetTracer(nil)")
	}

	// A destroyed QP's counters stay in the device's.
	before, _ := obs.CoreStats()
	if err := a.drv.ToRST(a.wq.Q); err != nil {
		t.Fatal(err)
	}
	if err := a.drv.DestroyQP(a.wq.Q); err != nil {
		t.Fatal(err)
	}
	after, _ := obs.CoreStats()
	if after.QPs.PacketsSent != before.QPs.PacketsSent {
		t.Errorf("packets sent %d after the QP went, %d before", after.QPs.PacketsSent, before.QPs.PacketsSent)
	}
}
