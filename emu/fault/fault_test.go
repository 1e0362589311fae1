package fault_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/verbstest"
)

// checkGoroutines fails the test if it leaves goroutines behind.
func checkGoroutines(t *testing.T) {
	t.Helper()
	verbstest.CheckGoroutines(t)
}

// testNet is two ports, hca0 (10.0.0.1) and hca1 (10.0.0.2), on a switch
// whose frames pass through an injector; each port records what it gets.
type testNet struct {
	inj   *fault.Injector
	ports [2]*fabric.Port
	log   *bytes.Buffer
	inbox
}

// inbox is what two ports got, each packet a copy.
type inbox struct {
	mu  sync.Mutex
	got [2][][]byte
}

// receiver returns port k's receiver: it records a copy and releases the
// packet.
func (n *inbox) receiver(k int) func([]byte) bool {
	return func(b []byte) bool {
		n.mu.Lock()
		n.got[k] = append(n.got[k], slices.Clone(b))
		n.mu.Unlock()
		fabric.Release(b)
		return true
	}
}

// newInjector decodes a plan and makes its injector with seed, logging
// to the buffer returned; the test closes it at its end.
func newInjector(t *testing.T, plan string, seed uint64) (*fault.Injector, *bytes.Buffer) {
	t.Helper()
	p, err := fault.DecodePlan(strings.NewReader(plan))
	if err != nil {
		t.Fatal(err)
	}
	log := &bytes.Buffer{}
	inj, err := fault.NewInjector(p, fault.Options{Seed: &seed, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inj.Close() })
	return inj, log
}

func newNet(t *testing.T, plan string, seed uint64) *testNet {
	t.Helper()
	n := &testNet{}
	n.inj, n.log = newInjector(t, plan, seed)
	sw := fabric.NewSwitch(n.inj.Decorator())
	for k := range 2 {
		n.ports[k] = sw.Attach("hca"+string(rune('0'+k)), [6]byte{0, 0x50, 0x56, 0, 0, byte(k)}, n.receiver(k))
		n.ports[k].SetAddrs([]netip.Addr{ip(k)})
	}
	return n
}

func ip(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(k + 1)}) }

// received returns what port k got so far.
func (n *inbox) received(k int) [][]byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got[k])
}

// waitFor waits (bounded) until port k got count frames.
func (n *inbox) waitFor(t *testing.T, k, count int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if got := n.received(k); len(got) >= count {
			return got
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("port %d got %d frames, want %d", k, len(n.received(k)), count)
	return nil
}

// pkt describes a test frame.
type pkt struct {
	op       roce.Opcode
	qpn, psn uint32
	payload  int
	syndrome roce.Syndrome
}

// fields are the transport packet p describes; payload byte i is i.
func (p pkt) fields() roce.PacketFields {
	payload := make([]byte, p.payload)
	for i := range payload {
		payload[i] = byte(i)
	}
	return roce.PacketFields{BTH: roce.BTHFields{Opcode: p.op, DestQP: p.qpn, PSN: p.psn, PKey: 0xFFFF},
		Payload: payload, AETH: roce.AETHFields{Syndrome: p.syndrome}, DETH: roce.DETHFields{QKey: roce.GSIQKey, SrcQP: 1}}
}

// frame builds a RoCEv2 frame from hca<src> to hca<1-src> in a pool buffer,
// with a valid ICRC.
func frame(t *testing.T, src int, p pkt) []byte {
	t.Helper()
	f := p.fields()
	ib, err := roce.Build(make([]byte, 8192), &f)
	if err != nil {
		t.Fatal(err)
	}
	ff := roce.FrameFields{Src: roce.MAC{0, 0x50, 0x56, 0, 0, byte(src)}, Dst: roce.MAC{0, 0x50, 0x56, 0, 0, byte(1 - src)},
		SrcIP: ip(src), DstIP: ip(1 - src), HopLimit: 64, SrcPort: 0xC000}
	out, err := roce.Frame(fabric.NewFrame(), &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (n *testNet) send(t *testing.T, src int, p pkt) []byte {
	t.Helper()
	f := frame(t, src, p)
	orig := slices.Clone(f)
	n.ports[src].Send(f)
	return orig
}

func parse(t *testing.T, frame []byte) (roce.Unframed, roce.Packet) {
	t.Helper()
	u, err := roce.Unframe(frame)
	if err != nil {
		t.Fatal(err)
	}
	p, err := roce.Parse(u.IB)
	if err != nil {
		t.Fatal(err)
	}
	return u, p
}

// diff returns the offsets where a and b differ.
func diff(a, b []byte) []int {
	var d []int
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			d = append(d, i)
		}
	}
	return d
}

func TestDecodeBadPlans(t *testing.T) {
	for _, tc := range []struct {
		name, plan string
		want       []string // substrings of the error
	}{
		{"unknown top field", `{"rules":[],"sed":1}`, []string{"unknown field", "sed"}},
		{"unknown rule field", `{"rules":[{"action":{"kind":"drop"}},{"name":"x","mach":{},"action":{"kind":"drop"}}]}`, []string{"rule 1", `"x"`, "mach"}},
		{"unknown match field", `{"rules":[{"match":{"qp":1},"action":{"kind":"drop"}}]}`, []string{"rule 0", `"qp"`}},
		{"negative probability", `{"rules":[{"name":"p","action":{"kind":"drop"},"schedule":{"probability":-0.1}}]}`, []string{"rule 0", "schedule.probability", "-0.1"}},
		{"probability above 1", `{"rules":[{"action":{"kind":"drop"},"schedule":{"probability":1.5}}]}`, []string{"schedule.probability"}},
		{"negative after", `{"rules":[{"action":{"kind":"drop"},"schedule":{"after":-1}}]}`, []string{"rule 0", "schedule.after"}},
		{"negative delay", `{"rules":[{"action":{"kind":"delay","delay":"-1ms"}}]}`, []string{"rule 0", "negative"}},
		{"no action", `{"rules":[{"match":{}}]}`, []string{"rule 0", "action.kind"}},
		{"unknown action", `{"rules":[{"action":{"kind":"explode"}}]}`, []string{"action.kind", "explode"}},
		{"foreign parameter", `{"rules":[{"action":{"kind":"drop","copies":2}}]}`, []string{"action.copies", "not a parameter of drop"}},
		{"too many copies", `{"rules":[{"action":{"kind":"duplicate","copies":1000}}]}`, []string{"action.copies"}},
		{"direction", `{"rules":[{"match":{"direction":"up"},"action":{"kind":"drop"}}]}`, []string{"match.direction"}},
		{"qpn beyond 24 bits", `{"rules":[{"match":{"qpn":16777216},"action":{"kind":"drop"}}]}`, []string{"match.qpn", "nothing can match"}},
		{"psn beyond 24 bits", `{"rules":[{"match":{"psn":{"first":0,"last":16777216}},"action":{"kind":"drop"}}]}`, []string{"match.psn"}},
		{"size min above max", `{"rules":[{"match":{"size":{"min":10,"max":5}},"action":{"kind":"drop"}}]}`, []string{"match.size", "nothing can match"}},
		{"unknown opcode", `{"rules":[{"match":{"opcodes":["RC_SEND_TWICE"]},"action":{"kind":"drop"}}]}`, []string{"match.opcodes[0]", "RC_SEND_TWICE"}},
		{"UD write", `{"rules":[{"match":{"transport":"ud","classes":["write"]},"action":{"kind":"drop"}}]}`, []string{"match", "nothing can match"}},
		{"opcode outside class", `{"rules":[{"match":{"opcodes":["RC_ACKNOWLEDGE"],"classes":["send"]},"action":{"kind":"drop"}}]}`, []string{"nothing can match"}},
		{"CM not on QP1", `{"rules":[{"match":{"qpn":5,"classes":["cm"]},"action":{"kind":"drop"}}]}`, []string{"match.classes", "QP 1"}},
		{"guest vs device", `{"rules":[{"match":{"guest":1,"device":"hca0"},"action":{"kind":"drop"}}]}`, []string{"match.guest", "nothing can match"}},
		{"bad peer", `{"rules":[{"match":{"peer":"10.0.0"},"action":{"kind":"drop"}}]}`, []string{"match.peer"}},
		{"empty window", `{"rules":[{"action":{"kind":"drop"},"schedule":{"from":"2s","until":"1s"}}]}`, []string{"schedule.until"}},
		{"arm unknown", `{"rules":[{"action":{"kind":"drop"},"schedule":{"arm":["nobody"]}}]}`, []string{"rule 0", "schedule.arm", "nobody"}},
		{"duplicate name", `{"rules":[{"name":"a","action":{"kind":"drop"}},{"name":"a","action":{"kind":"drop"}}]}`, []string{"rule 1", "field name"}},
		{"rewrite unknown field", `{"rules":[{"action":{"kind":"rewrite","field":"bth.color","value":1}}]}`, []string{"action.field", "bth.color"}},
		{"rewrite too wide", `{"rules":[{"action":{"kind":"rewrite","field":"bth.psn","value":16777216}}]}`, []string{"action.value", "24 bits"}},
		{"rewrite absent header", `{"rules":[{"match":{"classes":["send"],"transport":"rc"},"action":{"kind":"rewrite","field":"aeth.msn","value":1}}]}`, []string{"action.field", "nothing can be rewritten"}},
		{"corrupt beyond size", `{"rules":[{"match":{"size":{"min":0,"max":4}},"action":{"kind":"corrupt_payload","offset":4}}]}`, []string{"action.offset"}},
		{"occurrence without key", `{"rules":[{"match":{"occurrence":2},"action":{"kind":"drop"}}]}`, []string{"match.occurrence"}},
		{"trailing data", `{"rules":[]} {}`, []string{"after the JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fault.DecodePlan(strings.NewReader(tc.plan))
			if err == nil {
				t.Fatalf("plan accepted: %s", tc.plan)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestMatch sends one frame per case through a rule that drops what it
// matches.
func TestMatch(t *testing.T) {
	checkGoroutines(t)
	sendOnly := pkt{op: roce.RCSendOnly, qpn: 17, psn: 100, payload: 64}
	ack := pkt{op: roce.RCAcknowledge, qpn: 18, psn: 100}
	nak := pkt{op: roce.RCAcknowledge, qpn: 18, psn: 100, syndrome: roce.NAKSyndrome(0)}
	cm := pkt{op: roce.UDSendOnly, qpn: 1, psn: 5, payload: 256}
	for _, tc := range []struct {
		name  string
		match string
		src   int
		p     pkt
		want  bool
	}{
		{"everything", `{}`, 0, sendOnly, true},
		{"device tx", `{"device":"hca0","direction":"tx"}`, 0, sendOnly, true},
		{"device tx, other sender", `{"device":"hca0","direction":"tx"}`, 1, sendOnly, false},
		{"device rx", `{"device":"hca1","direction":"rx"}`, 0, sendOnly, true},
		{"device rx, other receiver", `{"device":"hca0","direction":"rx"}`, 0, sendOnly, false},
		{"guest either way", `{"guest":1}`, 0, sendOnly, true},
		{"qpn", `{"qpn":17}`, 0, sendOnly, true},
		{"other qpn", `{"qpn":16}`, 0, sendOnly, false},
		{"transport", `{"transport":"ud"}`, 0, sendOnly, false},
		{"opcode name", `{"opcodes":["RC_SEND_ONLY"]}`, 0, sendOnly, true},
		{"opcode number", `{"opcodes":["0x04"]}`, 0, sendOnly, true},
		{"other opcode", `{"opcodes":["RC_SEND_FIRST"]}`, 0, sendOnly, false},
		{"class send", `{"classes":["send"]}`, 0, sendOnly, true},
		{"class write", `{"classes":["write","atomic"]}`, 0, sendOnly, false},
		{"class ack", `{"classes":["ack"]}`, 1, ack, true},
		{"class nak on ack", `{"classes":["nak"]}`, 1, ack, false},
		{"class nak", `{"classes":["nak"]}`, 1, nak, true},
		{"psn in range", `{"psn":{"first":90,"last":100}}`, 0, sendOnly, true},
		{"psn out of range", `{"psn":{"first":101,"last":200}}`, 0, sendOnly, false},
		{"psn range wrapping", `{"psn":{"first":16777200,"last":100}}`, 0, sendOnly, true},
		{"peer of tx", `{"device":"hca0","direction":"tx","peer":"10.0.0.2"}`, 0, sendOnly, true},
		{"peer of rx", `{"device":"hca1","direction":"rx","peer":"10.0.0.1"}`, 0, sendOnly, true},
		{"wrong peer", `{"device":"hca1","direction":"rx","peer":"10.0.0.2"}`, 0, sendOnly, false},
		{"peer as mapped IPv6", `{"peer":"::ffff:10.0.0.2"}`, 0, sendOnly, true},
		{"size", `{"size":{"min":64,"max":64}}`, 0, sendOnly, true},
		{"size too big", `{"size":{"min":65,"max":4096}}`, 0, sendOnly, false},
		{"cm", `{"classes":["cm"]}`, 0, cm, false}, // payload[1] is 1, not the CM class
		{"mad to QP1", `{"qpn":1,"transport":"ud"}`, 0, cm, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNet(t, `{"rules":[{"match":`+tc.match+`,"action":{"kind":"drop"}}]}`, 1)
			n.send(t, tc.src, tc.p)
			delivered := len(n.received(1-tc.src)) == 1
			if delivered == tc.want {
				t.Fatalf("match %s: frame delivered=%v, want dropped=%v", tc.match, delivered, tc.want)
			}
			if fired := n.inj.Stats().Fired; fired != map[bool]uint64{true: 1}[tc.want] {
				t.Fatalf("fired %d", fired)
			}
		})
	}
	// A CM MAD (management class 7) is a cm frame.
	n := newNet(t, `{"rules":[{"match":{"classes":["cm"]},"action":{"kind":"drop"}}]}`, 1)
	f := frame(t, 0, cm)
	u, p := parse(t, f)
	p.Payload[1] = 0x07
	if err := roce.PutICRC(u.IP, u.UDP, u.IB); err != nil {
		t.Fatal(err)
	}
	n.ports[0].Send(f)
	if len(n.received(1)) != 0 {
		t.Fatal("CM MAD not matched")
	}
}

// TestPacketActions checks the exact change each action makes.
func TestPacketActions(t *testing.T) {
	checkGoroutines(t)
	data := pkt{op: roce.RCSendOnly, qpn: 17, psn: 0x123, payload: 100}
	for _, tc := range []struct {
		name   string
		action string
		check  func(t *testing.T, orig []byte, got [][]byte)
	}{
		{"drop", `{"kind":"drop"}`, func(t *testing.T, orig []byte, got [][]byte) {
			if len(got) != 0 {
				t.Fatalf("%d frames delivered", len(got))
			}
		}},
		{"duplicate", `{"kind":"duplicate","copies":2}`, func(t *testing.T, orig []byte, got [][]byte) {
			if len(got) != 3 {
				t.Fatalf("%d frames delivered, want 3", len(got))
			}
			for _, g := range got {
				if !bytes.Equal(g, orig) {
					t.Fatal("a copy differs")
				}
			}
		}},
		{"corrupt ICRC", `{"kind":"corrupt_icrc"}`, func(t *testing.T, orig []byte, got [][]byte) {
			u, _ := parse(t, got[0])
			icrc := len(got[0]) - roce.ICRCSize
			if d := diff(orig, got[0]); !slices.Equal(d, []int{icrc, icrc + 1, icrc + 2, icrc + 3}) {
				t.Fatalf("changed bytes %v, want the ICRC's %d..%d", d, icrc, icrc+3)
			}
			for i := icrc; i < len(orig); i++ {
				if got[0][i] != ^orig[i] {
					t.Fatalf("ICRC byte %d: %#x, want %#x", i, got[0][i], ^orig[i])
				}
			}
			if err := u.VerifyICRC(); err == nil {
				t.Fatal("ICRC still valid")
			}
		}},
		{"corrupt payload", `{"kind":"corrupt_payload","offset":3,"xor":1}`, func(t *testing.T, orig []byte, got [][]byte) {
			u, p := parse(t, got[0])
			if err := u.VerifyICRC(); err != nil {
				t.Fatalf("ICRC not recomputed: %v", err)
			}
			if p.Payload[3] != 3^1 {
				t.Fatalf("payload[3] = %d", p.Payload[3])
			}
			payload3 := len(got[0]) - len(u.IB) + p.HeaderLen + 3
			d := diff(orig, got[0])
			if len(d) < 2 || d[0] != payload3 || d[len(d)-1] < len(got[0])-roce.ICRCSize {
				t.Fatalf("changed bytes %v: want payload byte %d and the ICRC", d, payload3)
			}
		}},
		{"rewrite PSN", `{"kind":"rewrite","field":"bth.psn","value":77}`, func(t *testing.T, orig []byte, got [][]byte) {
			u, p := parse(t, got[0])
			if p.BTH.PSN() != 77 {
				t.Fatalf("PSN %d", p.BTH.PSN())
			}
			if err := u.VerifyICRC(); err != nil {
				t.Fatalf("ICRC not recomputed: %v", err)
			}
			bth := len(got[0]) - len(u.IB)
			for _, i := range diff(orig, got[0]) {
				if (i < bth+9 || i > bth+11) && i < len(got[0])-roce.ICRCSize {
					t.Fatalf("byte %d changed (the PSN is %d..%d)", i, bth+9, bth+11)
				}
			}
		}},
		{"rewrite keeping the ICRC", `{"kind":"rewrite","field":"bth.dest_qp","value":99,"keep_icrc":true}`, func(t *testing.T, orig []byte, got [][]byte) {
			u, p := parse(t, got[0])
			if p.BTH.DestQP() != 99 || u.VerifyICRC() == nil {
				t.Fatalf("dest QP %d, ICRC error %v: want 99 and a stale ICRC", p.BTH.DestQP(), u.VerifyICRC())
			}
			if d := diff(orig, got[0]); len(d) != 1 {
				t.Fatalf("changed bytes %v, want the QPN's last byte only", d)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNet(t, `{"rules":[{"action":`+tc.action+`}]}`, 1)
			orig := n.send(t, 0, data)
			tc.check(t, orig, n.received(1))
		})
	}
}

// TestHeldFrames: delays pass the frame on later, reorders after the next
// n frames of the same sender or at max_hold; Close releases what is held.
func TestHeldFrames(t *testing.T) {
	checkGoroutines(t)
	t.Run("delay", func(t *testing.T) {
		n := newNet(t, `{"rules":[{"action":{"kind":"delay","delay":"1ms","jitter":"1ms"}}]}`, 1)
		orig := n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 8})
		got := n.waitFor(t, 1, 1)
		if !bytes.Equal(got[0], orig) {
			t.Fatal("delayed frame changed")
		}
	})
	t.Run("reorder", func(t *testing.T) {
		n := newNet(t, `{"rules":[{"match":{"psn":{"first":1,"last":1}},"action":{"kind":"reorder","frames":2,"max_hold":"10s"}}]}`, 1)
		for psn := range uint32(4) {
			n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
		}
		var order []uint32
		for _, f := range n.waitFor(t, 1, 4) {
			_, p := parse(t, f)
			order = append(order, p.BTH.PSN())
		}
		if !slices.Equal(order, []uint32{0, 2, 3, 1}) {
			t.Fatalf("delivery order %v, want [0 2 3 1]", order)
		}
	})
	t.Run("reorder released at max_hold", func(t *testing.T) {
		n := newNet(t, `{"rules":[{"action":{"kind":"reorder","frames":5,"max_hold":"1ms"}}]}`, 1)
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 8})
		n.waitFor(t, 1, 1)
		if n.inj.Held() != 0 {
			t.Fatalf("%d frames still held", n.inj.Held())
		}
	})
	t.Run("reorder counts only the same sender", func(t *testing.T) {
		n := newNet(t, `{"rules":[{"match":{"device":"hca0","direction":"tx"},"action":{"kind":"reorder","frames":1,"max_hold":"10s"}}]}`, 1)
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 8})
		n.send(t, 1, pkt{op: roce.RCAcknowledge, qpn: 18, psn: 1})
		if n.inj.Held() != 1 || len(n.received(1)) != 0 {
			t.Fatalf("held %d, delivered %d: a frame of another sender released the hold", n.inj.Held(), len(n.received(1)))
		}
	})
	t.Run("close releases held frames", func(t *testing.T) {
		n := newNet(t, `{"rules":[{"action":{"kind":"delay","delay":"10s"}},{"action":{"kind":"drop"}}]}`, 1)
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 8})
		if n.inj.Held() != 1 {
			t.Fatalf("held %d", n.inj.Held())
		}
		// The delayed frame was not seen by the drop rule after it.
		if s := n.inj.Stats(); s.Rules[1].Matched != 0 {
			t.Fatalf("the rule after a delay saw the frame: %+v", s.Rules[1])
		}
		if err := n.inj.Close(); err != nil {
			t.Fatal(err)
		}
		if n.inj.Held() != 0 || len(n.received(1)) != 0 {
			t.Fatalf("after Close: held %d, delivered %d", n.inj.Held(), len(n.received(1)))
		}
		// After Close, delays pass frames at once.
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 2, payload: 8})
		if len(n.received(1)) != 1 {
			t.Fatal("frame held after Close")
		}
	})
}

// firings parses a fault log, without the times and the start line.
type firing struct {
	Rule, Device, Dir, Opcode string
	QPN, PSN                  uint32
	Occurrence                uint64
	Action                    fault.Action
}

func firings(t *testing.T, log []byte) []firing {
	t.Helper()
	var out []firing
	for line := range strings.SplitSeq(strings.TrimSpace(string(log)), "\n") {
		if strings.Contains(line, `"event":"start"`) || line == "" {
			continue
		}
		var f firing
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, f)
	}
	return out
}

func TestSchedule(t *testing.T) {
	checkGoroutines(t)
	psns := func(t *testing.T, plan string, frames int) []uint32 {
		n := newNet(t, plan, 7)
		for psn := range uint32(frames) {
			n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
		}
		var dropped []uint32
		for _, f := range firings(t, n.log.Bytes()) {
			dropped = append(dropped, f.PSN)
		}
		return dropped
	}
	for _, tc := range []struct {
		name, schedule string
		want           []uint32
	}{
		{"always", `{}`, []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"after", `{"after":7}`, []uint32{7, 8, 9}},
		{"every", `{"every":3}`, []uint32{2, 5, 8}},
		{"after and every", `{"after":2,"every":3}`, []uint32{4, 7}},
		{"times", `{"after":1,"times":2}`, []uint32{1, 2}},
		{"probability 0", `{"probability":0}`, nil},
		{"window not open yet", `{"from":"1h"}`, nil},
		{"disarmed", `{"disarmed":true}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := psns(t, `{"rules":[{"action":{"kind":"drop"},"schedule":`+tc.schedule+`}]}`, 10)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fired at PSNs %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("arm and disarm", func(t *testing.T) {
		// The 3rd frame fires "trigger", which arms "burst"; burst drops
		// that frame and the next (times 2), disarms trigger and arms
		// "late", which skips 4 matches and drops the rest.
		plan := `{"rules":[
			{"name":"trigger","schedule":{"after":2,"times":1,"arm":["burst"]},"action":{"kind":"duplicate"}},
			{"name":"burst","schedule":{"disarmed":true,"times":2,"arm":["late"],"disarm":["trigger"]},"action":{"kind":"drop"}},
			{"name":"late","schedule":{"disarmed":true,"after":4},"action":{"kind":"drop"}}]}`
		n := newNet(t, plan, 7)
		for psn := range uint32(10) {
			n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
		}
		var got []string
		for _, f := range firings(t, n.log.Bytes()) {
			got = append(got, f.Rule+":"+string(rune('0'+f.PSN)))
		}
		// late is armed at PSN 2 but does not see PSNs 2 and 3 (dropped
		// by burst before it); it matches 4..9 and skips 4 of them.
		want := []string{"trigger:2", "burst:2", "burst:3", "late:8", "late:9"}
		if !slices.Equal(got, want) {
			t.Fatalf("firings %v, want %v", got, want)
		}
	})
	t.Run("seeded determinism", func(t *testing.T) {
		plan := `{"rules":[
			{"name":"loss","match":{"classes":["send"]},"schedule":{"probability":0.2},"action":{"kind":"drop"}},
			{"name":"dup","schedule":{"probability":0.1},"action":{"kind":"duplicate","copies":1}},
			{"name":"late","schedule":{"probability":0.3},"action":{"kind":"corrupt_payload","offset":0}}]}`
		run := func(seed uint64) ([]firing, [][]byte) {
			n := newNet(t, plan, seed)
			for psn := range uint32(500) {
				n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn % 50, payload: 8})
				n.send(t, 1, pkt{op: roce.RCAcknowledge, qpn: 18, psn: psn % 50})
			}
			return firings(t, n.log.Bytes()), n.received(1)
		}
		f1, got1 := run(42)
		f2, got2 := run(42)
		if len(f1) < 100 || !slices.EqualFunc(f1, f2, func(a, b firing) bool { return a == b }) {
			t.Fatalf("two runs with seed 42: %d and %d firings, not identical", len(f1), len(f2))
		}
		if !slices.EqualFunc(got1, got2, bytes.Equal) {
			t.Fatal("two runs with seed 42 delivered different frames")
		}
		f3, _ := run(43)
		if slices.EqualFunc(f1, f3, func(a, b firing) bool { return a == b }) {
			t.Fatal("seeds 42 and 43 fired identically")
		}
	})
}

// TestCountersAndLog: the per-rule counters equal the log's lines per
// rule, and the frames delivered agree with the actions.
func TestCountersAndLog(t *testing.T) {
	checkGoroutines(t)
	plan := `{"seed":5,"rules":[
		{"name":"loss","match":{"device":"hca1","direction":"rx"},"schedule":{"probability":0.05},"action":{"kind":"drop"}},
		{"name":"dup","match":{"direction":"tx"},"schedule":{"probability":0.01},"action":{"kind":"duplicate"}},
		{"name":"acks","match":{"classes":["ack"]},"schedule":{"every":10},"action":{"kind":"drop"}}]}`
	n := newNet(t, plan, 5)
	const frames = 2000
	for psn := range uint32(frames) {
		n.send(t, 0, pkt{op: roce.RCRDMAWriteOnly, qpn: 17, psn: psn, payload: 32})
		n.send(t, 1, pkt{op: roce.RCAcknowledge, qpn: 18, psn: psn})
	}
	perRule := map[string]uint64{}
	for _, f := range firings(t, n.log.Bytes()) {
		perRule[f.Rule]++
	}
	s := n.inj.Stats()
	var total uint64
	for _, r := range s.Rules {
		if r.Fired != perRule[r.Name] {
			t.Errorf("rule %s: counter %d, log %d", r.Name, r.Fired, perRule[r.Name])
		}
		if r.Fired == 0 {
			t.Errorf("rule %s never fired", r.Name)
		}
		total += r.Fired
	}
	if s.Fired != total {
		t.Errorf("total %d, rules %d", s.Fired, total)
	}
	loss, acks := s.Rules[0].Fired, s.Rules[2].Fired
	if acks != frames/10 {
		t.Errorf("every 10th ACK: %d firings, want %d", acks, frames/10)
	}
	// Writes to hca1: lost by "loss" (then "dup" does not see them) or
	// passed, duplicated by "dup" or not. ACKs to hca0: duplicated by
	// "dup" or not, then every 10th dropped, copies included.
	var dupWrites, dupAcks uint64
	droppedAcks := map[uint32]bool{}
	logged := firings(t, n.log.Bytes())
	for _, f := range logged {
		if f.Rule == "acks" {
			droppedAcks[f.PSN] = true
		}
	}
	for _, f := range logged {
		switch {
		case f.Rule != "dup":
		case f.Opcode == "RC_RDMA_WRITE_ONLY":
			dupWrites++
		case !droppedAcks[f.PSN]:
			dupAcks++
		}
	}
	if got, want := uint64(len(n.received(1))), frames-loss+dupWrites; got != want {
		t.Errorf("hca1 got %d frames, want %d sent - %d lost + %d duplicated", got, want, loss, dupWrites)
	}
	if got, want := uint64(len(n.received(0))), frames-acks+dupAcks; got != want {
		t.Errorf("hca0 got %d frames, want %d", got, want)
	}
}

// TestReplay: a log turned into a plan fires the same faults (same
// frames, same actions) on the same traffic, retransmissions included.
func TestReplay(t *testing.T) {
	checkGoroutines(t)
	plan := `{"rules":[
		{"name":"loss","schedule":{"probability":0.1},"action":{"kind":"drop"}},
		{"name":"bits","match":{"classes":["send"]},"schedule":{"probability":0.05},"action":{"kind":"corrupt_payload","offset":1}},
		{"name":"slow","schedule":{"probability":0.05},"action":{"kind":"delay","jitter":"1ms"}}]}`
	traffic := func(n *testNet) {
		// Every PSN goes three times, as retransmissions do.
		for round := range 3 {
			for psn := range uint32(100) {
				n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 16})
				n.send(t, 1, pkt{op: roce.RCAcknowledge, qpn: 18, psn: psn + uint32(round)})
			}
		}
	}
	n := newNet(t, plan, 99)
	traffic(n)
	orig := firings(t, n.log.Bytes())
	if len(orig) < 30 {
		t.Fatalf("only %d firings", len(orig))
	}
	replayed, err := fault.Replay(bytes.NewReader(n.log.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Seed == nil || *replayed.Seed != 99 {
		t.Fatalf("replayed seed %v, want 99", replayed.Seed)
	}
	// Through the file format, as "hcaemu faults replay" does.
	var file bytes.Buffer
	if err := replayed.Encode(&file); err != nil {
		t.Fatal(err)
	}
	r := newNet(t, file.String(), 1)
	traffic(r)
	again := firings(t, r.log.Bytes())
	if len(again) != len(orig) {
		t.Fatalf("replay fired %d times, the run %d", len(again), len(orig))
	}
	for i := range orig {
		a, b := orig[i], again[i]
		if a.Action.Kind == fault.ActDelay {
			a.Action.Jitter, b.Action.Delay = 0, 0 // the replay fires the drawn delay
		}
		b.Rule = a.Rule
		if a != b {
			t.Fatalf("firing %d: run %+v, replay %+v", i, a, b)
		}
	}
	waitHeld(t, n.inj)
	waitHeld(t, r.inj)
	g1, g2 := n.received(1), r.received(1)
	key := func(f []byte) string { return string(f) }
	s1, s2 := slices.Sorted(slices.Values(mapf(g1, key))), slices.Sorted(slices.Values(mapf(g2, key)))
	if !slices.Equal(s1, s2) {
		t.Fatal("the replay delivered other frames")
	}
}

// waitHeld waits (bounded) until the injector holds no frame.
func waitHeld(t *testing.T, inj *fault.Injector) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for inj.Held() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames still held", inj.Held())
		}
		time.Sleep(time.Millisecond)
	}
}

func mapf[T, U any](s []T, f func(T) U) []U {
	out := make([]U, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func TestControl(t *testing.T) {
	checkGoroutines(t)
	n := newNet(t, `{"rules":[{"name":"base","action":{"kind":"duplicate"},"schedule":{"disarmed":true}}]}`, 1)
	path := filepath.Join(t.TempDir(), "faults.sock")
	ctl, err := listenControl(path, n.inj)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	do := func(line string) fault.Response {
		t.Helper()
		return rawCommand(t, path, line)
	}
	names := func() []string {
		rsp := do(`{"op":"list"}`)
		var out []string
		for _, r := range rsp.Rules {
			out = append(out, r.Name+map[bool]string{true: "+", false: "-"}[r.Armed])
		}
		return out
	}
	for _, tc := range []struct {
		cmd     string
		wantErr string
		names   []string
	}{
		{`{"op":"add","rule":{"name":"loss","match":{"qpn":17},"action":{"kind":"drop"}}}`, "", []string{"base-", "loss+"}},
		{`{"op":"add","rule":{"match":{"qpn":18},"action":{"kind":"drop"},"schedule":{"arm":["base"]}}}`, "", []string{"base-", "loss+", "rule1+"}},
		{`{"op":"add","rule":{"name":"loss","action":{"kind":"drop"}}}`, "exists", nil},
		{`{"op":"add","rule":{"action":{"kind":"drop"},"schedule":{"probability":2}}}`, "schedule.probability", nil},
		{`{"op":"add","rule":{"action":{"kind":"drop"},"color":1}}`, "color", nil},
		{`{"op":"add","rule":{"action":{"kind":"drop"},"schedule":{"arm":["ghost"]}}}`, "ghost", nil},
		{`{"op":"add"}`, "give the rule", nil},
		{`{"op":"rm","name":"ghost"}`, "no such rule", nil},
		{`{"op":"rm","name":"base"}`, "armed or disarmed by another rule", nil},
		{`{"op":"rm"}`, "name", nil},
		{`{"op":"explode"}`, "unknown op", nil},
		{`{"op":"list","name":"x"}`, "takes no name", nil},
		{`{"op":"list","extra":1}`, "extra", nil},
		{`not json`, "bad command", nil},
		{`{"op":"enable","name":"base"}`, "", []string{"base+", "loss+", "rule1+"}},
		{`{"op":"disable","name":"loss"}`, "", []string{"base+", "loss-", "rule1+"}},
		{`{"op":"rm","name":"rule1"}`, "", []string{"base+", "loss-"}},
		{`{"op":"clear"}`, "", nil},
	} {
		before := names()
		rsp := do(tc.cmd)
		after := names()
		if tc.wantErr != "" {
			if rsp.OK || !strings.Contains(rsp.Error, tc.wantErr) {
				t.Errorf("%s: %+v, want an error saying %q", tc.cmd, rsp, tc.wantErr)
			}
			if !slices.Equal(before, after) {
				t.Errorf("%s: failed but changed the rules: %v → %v", tc.cmd, before, after)
			}
			continue
		}
		if !rsp.OK || !slices.Equal(after, tc.names) {
			t.Errorf("%s: %+v, rules %v, want %v", tc.cmd, rsp, after, tc.names)
		}
	}
	// Live rules act on traffic, and stats count them.
	do(`{"op":"add","rule":{"name":"cut","match":{"qpn":17},"action":{"kind":"drop"},"schedule":{"after":1}}}`)
	for psn := range uint32(3) {
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
	}
	rsp, err := command(path, fault.Request{Op: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	if !rsp.OK || rsp.Stats == nil || rsp.Stats.Seed != 1 || len(rsp.Stats.Rules) != 1 || rsp.Stats.Rules[0].Fired != 2 || rsp.Stats.Rules[0].Matched != 3 {
		t.Fatalf("stats %+v", rsp.Stats)
	}
	if len(n.received(1)) != 1 {
		t.Fatalf("delivered %d, want 1", len(n.received(1)))
	}
}

// rawCommand sends one line as is.
func rawCommand(t *testing.T, path, line string) fault.Response {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	var rsp fault.Response
	if err := json.NewDecoder(conn).Decode(&rsp); err != nil {
		t.Fatal(err)
	}
	return rsp
}

// FuzzInjector: any plan the decoder accepts, applied to any frame, never
// panics; a frame is delivered at most 1 + copies times.
func FuzzInjector(f *testing.F) {
	f.Add(`{"rules":[{"action":{"kind":"rewrite","field":"bth.opcode","value":17}},{"match":{"classes":["nak"]},"action":{"kind":"rewrite","field":"aeth.msn","value":5}}]}`, []byte{})
	f.Add(`{"rules":[{"action":{"kind":"rewrite","field":"bth.tver","value":3}},{"action":{"kind":"corrupt_payload","offset":3}}]}`, []byte{})
	f.Add(`{"rules":[{"match":{"classes":["cm"]},"action":{"kind":"duplicate","copies":3}},{"action":{"kind":"corrupt_icrc"}}]}`, []byte{1, 2, 3})
	f.Add(`{"rules":[{"action":{"kind":"reorder","frames":1,"max_hold":"1ms"}}]}`, []byte{})
	f.Fuzz(func(t *testing.T, plan string, raw []byte) {
		p, err := fault.DecodePlan(strings.NewReader(plan))
		if err != nil {
			return
		}
		for _, r := range p.Rules {
			if r.Action.Kind == fault.ActDelay {
				return // held for up to 10 s: not for a fuzzer
			}
		}
		n := newNet(t, plan, 1)
		// A well-formed frame, and the fuzzer's bytes as a frame.
		n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 64})
		frame := fabric.NewFrame()
		n.ports[0].Send(frame[:copy(frame, raw)])
		if err := n.inj.Close(); err != nil {
			t.Fatal(err)
		}
		if got := len(n.received(1)); got > 2*17 {
			t.Fatalf("%d frames delivered", got)
		}
	})
}
