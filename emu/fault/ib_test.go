package fault_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// ibNet is two IB ports, hca0 (LID 2) and hca1 (LID 3), on a subnet whose
// link passes through an injector's subnet decorator; with eth, also two
// RoCE ports on an Ethernet segment through the same injector's fabric
// decorator (testNet's).
type ibNet struct {
	inj   *fault.Injector
	log   *bytes.Buffer
	sub   *subnet.Subnet
	ports [2]*subnet.Port
	inbox
}

func newIBNet(t *testing.T, plan string, seed uint64) *ibNet {
	t.Helper()
	n := &ibNet{}
	n.inj, n.log = newInjector(t, plan, seed)
	n.attach(t, subnet.New(subnet.Config{}, n.inj.SubnetDecorator()))
	return n
}

func (n *ibNet) attach(t *testing.T, s *subnet.Subnet) {
	t.Helper()
	n.sub = s
	for k := range 2 {
		var err error
		n.ports[k], err = s.Attach(fmt.Sprintf("hca%d", k), uint64(0x10+k), n.receiver(k))
		if err != nil {
			t.Fatal(err)
		}
		if want := uint16(2 + k); n.ports[k].LID() != want {
			t.Fatalf("port %d has LID %d, want %d", k, n.ports[k].LID(), want)
		}
	}
}

// ibPacket builds an IB packet from hca<src> to hca<1-src> (local, no GRH)
// in a pool buffer, with valid CRCs.
func ibPacket(t testing.TB, src int, p pkt) []byte {
	t.Helper()
	f := ib.PacketFields{LRH: ib.LRHFields{DLID: uint16(3 - src), SLID: uint16(2 + src)}, Transport: p.fields()}
	if pl := f.Transport.Payload; p.qpn == 1 && len(pl) >= 24 {
		pl[0], pl[1] = 1, 0x07 // a CM MAD's base version and class
	}
	out, err := ib.Build(fabric.NewFrame(), &f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (n *ibNet) send(t *testing.T, src int, p pkt) []byte {
	t.Helper()
	b := ibPacket(t, src, p)
	orig := slices.Clone(b)
	n.ports[src].Send(b)
	return orig
}

func ibParse(t *testing.T, b []byte) ib.Packet {
	t.Helper()
	p, err := ib.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIBMatch sends one IB packet per case through a rule that drops what
// it matches, and checks whether it arrived.
func TestIBMatch(t *testing.T) {
	send := pkt{op: roce.RCSendOnly, qpn: 17, psn: 100, payload: 64}
	for _, tc := range []struct {
		name  string
		match string
		src   int
		p     pkt
		want  bool
	}{
		{"empty", `{}`, 0, send, true},
		{"device tx", `{"device":"hca0","direction":"tx"}`, 0, send, true},
		{"device tx other", `{"device":"hca1","direction":"tx"}`, 0, send, false},
		{"device rx", `{"device":"hca1","direction":"rx"}`, 0, send, true},
		{"guest rx", `{"guest":0,"direction":"rx"}`, 0, send, false},
		{"qpn", `{"qpn":17}`, 0, send, true},
		{"qpn other", `{"qpn":18}`, 0, send, false},
		{"opcode", `{"opcodes":["RC_SEND_ONLY"]}`, 0, send, true},
		{"opcode other", `{"opcodes":["RC_SEND_FIRST"]}`, 0, send, false},
		{"transport ud", `{"transport":"ud"}`, 0, send, false},
		{"class send", `{"classes":["send"]}`, 0, send, true},
		{"class ack", `{"classes":["ack"]}`, 1, pkt{op: roce.RCAcknowledge, qpn: 17, psn: 100}, true},
		{"class nak on an ack", `{"classes":["nak"]}`, 1, pkt{op: roce.RCAcknowledge, qpn: 17, psn: 100}, false},
		{"class nak", `{"classes":["nak"]}`, 1, pkt{op: roce.RCAcknowledge, qpn: 17, psn: 100, syndrome: roce.Syndrome(0x61)}, true},
		{"class cm", `{"classes":["cm"]}`, 0, pkt{op: roce.UDSendOnly, qpn: 1, psn: 5, payload: 256}, true},
		{"class cm not QP1", `{"classes":["cm"]}`, 0, pkt{op: roce.UDSendOnly, qpn: 5, psn: 5, payload: 256}, false},
		{"psn", `{"psn":{"first":90,"last":110}}`, 0, send, true},
		{"psn outside", `{"psn":{"first":101,"last":110}}`, 0, send, false},
		{"psn wrapping", `{"psn":{"first":16777200,"last":100}}`, 0, send, true},
		{"size", `{"size":{"min":64,"max":64}}`, 0, send, true},
		{"size outside", `{"size":{"min":65,"max":100}}`, 0, send, false},
		{"peer lid tx", `{"device":"hca0","direction":"tx","peer":"lid:3"}`, 0, send, true},
		{"peer lid rx", `{"device":"hca1","direction":"rx","peer":"lid:2"}`, 0, send, true},
		{"peer lid hex", `{"peer":"LID:0x3"}`, 0, send, true},
		{"peer lid other", `{"peer":"lid:4"}`, 0, send, false},
		{"peer lid rx is the source", `{"device":"hca1","direction":"rx","peer":"lid:3"}`, 0, send, false},
		{"peer ip on IB", `{"peer":"10.0.0.2"}`, 0, send, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newIBNet(t, fmt.Sprintf(`{"rules":[{"name":"r","match":%s,"action":{"kind":"drop"}}]}`, tc.match), 1)
			n.send(t, tc.src, tc.p)
			got := len(n.received(1 - tc.src))
			if dropped := got == 0; dropped != tc.want {
				t.Errorf("matched %v, want %v", dropped, tc.want)
			}
		})
	}
}

// TestIBPeerRefused: a LID peer is checked.
func TestIBPeerRefused(t *testing.T) {
	for _, peer := range []string{"lid:0", "lid:65535", "lid:65536", "lid:x", "lid:"} {
		_, err := fault.DecodePlan(strings.NewReader(`{"rules":[{"match":{"peer":"` + peer + `"},"action":{"kind":"drop"}}]}`))
		if err == nil || !strings.Contains(err.Error(), "match.peer") {
			t.Errorf("peer %q: error %v, want one naming match.peer", peer, err)
		}
	}
}

// TestIBActions applies each packet action to an IB packet and checks
// what the receiver gets: whether it parses, or fails its ICRC with a
// valid VCRC, as the action intends.
func TestIBActions(t *testing.T) {
	send := pkt{op: roce.RCSendOnly, qpn: 17, psn: 100, payload: 64}
	t.Run("drop", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"drop"}}]}`, 1)
		n.send(t, 0, send)
		if got := n.received(1); len(got) != 0 {
			t.Fatalf("got %d packets", len(got))
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"duplicate","copies":2}}]}`, 1)
		orig := n.send(t, 0, send)
		got := n.received(1)
		if len(got) != 3 {
			t.Fatalf("got %d packets, want 3", len(got))
		}
		for _, g := range got {
			if !bytes.Equal(g, orig) {
				t.Fatal("a copy differs")
			}
		}
	})
	t.Run("delay", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"delay","delay":"20ms"}}]}`, 1)
		start := time.Now()
		orig := n.send(t, 0, send)
		got := n.waitFor(t, 1, 1)
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("delivered after %v", d)
		}
		if !bytes.Equal(got[0], orig) {
			t.Error("the delayed packet changed")
		}
	})
	t.Run("reorder", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"match":{"psn":{"first":1,"last":1}},"action":{"kind":"reorder","frames":2,"max_hold":"10s"}}]}`, 1)
		for psn := uint32(1); psn <= 3; psn++ {
			n.send(t, 0, pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
		}
		got := n.waitFor(t, 1, 3)
		var psns []uint32
		for _, g := range got {
			p := ibParse(t, g)
			psns = append(psns, p.Transport.BTH.PSN())
		}
		if !slices.Equal(psns, []uint32{2, 3, 1}) {
			t.Errorf("PSNs %v, want [2 3 1]", psns)
		}
		if n.inj.Held() != 0 {
			t.Error("a packet is still held")
		}
	})
	t.Run("corrupt_icrc", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"corrupt_icrc"}}]}`, 1)
		orig := n.send(t, 0, send)
		got := n.received(1)
		if len(got) != 1 {
			t.Fatalf("got %d packets", len(got))
		}
		if _, err := ib.Parse(got[0]); !errors.Is(err, ib.ErrBadICRC) {
			t.Fatalf("Parse: %v, want ErrBadICRC (with a valid VCRC)", err)
		}
		n6 := len(orig) - 6
		if !bytes.Equal(got[0][:n6], orig[:n6]) {
			t.Error("bytes before the ICRC changed")
		}
		for i := range 4 {
			if got[0][n6+i] != ^orig[n6+i] {
				t.Errorf("ICRC byte %d not inverted", i)
			}
		}
	})
	t.Run("corrupt_payload", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"corrupt_payload","offset":5,"xor":16}}]}`, 1)
		orig := n.send(t, 0, send)
		got := n.received(1)
		if len(got) != 1 {
			t.Fatalf("got %d packets", len(got))
		}
		p := ibParse(t, got[0]) // valid ICRC and VCRC
		if p.Transport.Payload[5] != 5^16 {
			t.Errorf("payload byte 5 is %#x", p.Transport.Payload[5])
		}
		at := ib.LRHSize + roce.BTHSize + 5
		if d := diff(got[0][:len(orig)-6], orig[:len(orig)-6]); !slices.Equal(d, []int{at}) {
			t.Errorf("changed bytes %v, want [%d] (and the CRCs)", d, at)
		}
	})
	t.Run("corrupt_payload skips short packets", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"corrupt_payload","offset":100}}]}`, 1)
		orig := n.send(t, 0, send)
		if got := n.received(1); len(got) != 1 || !bytes.Equal(got[0], orig) {
			t.Error("a packet without a byte at the offset changed")
		}
	})
	t.Run("rewrite", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"rewrite","field":"bth.psn","value":4242}}]}`, 1)
		n.send(t, 0, send)
		got := n.received(1)
		if len(got) != 1 {
			t.Fatalf("got %d packets", len(got))
		}
		if p := ibParse(t, got[0]); p.Transport.BTH.PSN() != 4242 {
			t.Errorf("PSN %d", p.Transport.BTH.PSN())
		}
	})
	t.Run("rewrite keep_icrc", func(t *testing.T) {
		n := newIBNet(t, `{"rules":[{"action":{"kind":"rewrite","field":"bth.dest_qp","value":99,"keep_icrc":true}}]}`, 1)
		n.send(t, 0, send)
		got := n.received(1)
		if len(got) != 1 {
			t.Fatalf("got %d packets", len(got))
		}
		if _, err := ib.Parse(got[0]); !errors.Is(err, ib.ErrBadICRC) {
			t.Fatalf("Parse: %v, want ErrBadICRC (with a valid VCRC)", err)
		}
		if qp := roce.BTH(got[0][ib.LRHSize:]).DestQP(); qp != 99 {
			t.Errorf("dest QP %d", qp)
		}
	})
	t.Run("rewrite then match", func(t *testing.T) {
		// The later rules see the packet rewritten.
		n := newIBNet(t, `{"rules":[{"action":{"kind":"rewrite","field":"bth.dest_qp","value":99}},{"match":{"qpn":99},"action":{"kind":"drop"}}]}`, 1)
		n.send(t, 0, send)
		if got := n.received(1); len(got) != 0 {
			t.Error("the second rule did not see the rewritten packet")
		}
	})
	t.Run("global packet", func(t *testing.T) {
		// A packet with a GRH: the ICRC and VCRC are recomputed over it.
		n := newIBNet(t, `{"rules":[{"action":{"kind":"corrupt_payload"}}]}`, 1)
		payload := make([]byte, 32)
		f := ib.PacketFields{
			LRH: ib.LRHFields{DLID: 3, SLID: 2},
			GRH: &ib.GRHFields{HopLmt: 1, SGID: n.ports[0].GID(), DGID: n.ports[1].GID()},
			Transport: roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.UDSendOnly, DestQP: 5, PKey: 0xFFFF},
				DETH: roce.DETHFields{QKey: 7, SrcQP: 9}, Payload: payload},
		}
		b, err := ib.Build(fabric.NewFrame(), &f)
		if err != nil {
			t.Fatal(err)
		}
		n.ports[0].Send(b)
		got := n.received(1)
		if len(got) != 1 {
			t.Fatalf("got %d packets", len(got))
		}
		if p := ibParse(t, got[0]); p.GRH == nil || p.Transport.Payload[0] != 0xFF {
			t.Error("not the corrupted global packet")
		}
	})
}

// TestIBLogAndReplay: the log names IB packets' LIDs, and its replay
// fires at the same packets again (only at IB packets: the peer's LID).
func TestIBLogAndReplay(t *testing.T) {
	const plan = `{"seed":7,"rules":[{"name":"loss","match":{"classes":["send"]},"action":{"kind":"drop"},"schedule":{"probability":0.5}}]}`
	traffic := func(n *ibNet) {
		for psn := range uint32(20) {
			n.send(t, int(psn%2), pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
		}
	}
	n := newIBNet(t, plan, 7)
	traffic(n)
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(n.log.String()), "\n")[1:] {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Fatal("nothing fired")
	}
	for _, m := range lines {
		src := int(m["psn"].(float64)) % 2
		if m["slid"] != float64(2+src) || m["dlid"] != float64(3-src) || m["device"] != fmt.Sprintf("hca%d", src) {
			t.Errorf("log line %v: want slid %d, dlid %d, device hca%d", m, 2+src, 3-src, src)
		}
	}
	replay, err := fault.Replay(strings.NewReader(n.log.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(replay.Rules) != len(lines) {
		t.Fatalf("%d rules for %d firings", len(replay.Rules), len(lines))
	}
	for _, r := range replay.Rules {
		if !strings.HasPrefix(r.Match.Peer, "lid:") {
			t.Errorf("replay rule %s: peer %q, want a LID", r.Name, r.Match.Peer)
		}
	}
	var enc bytes.Buffer
	if err := replay.Encode(&enc); err != nil {
		t.Fatal(err)
	}
	m := newIBNet(t, enc.String(), 99)
	traffic(m)
	for k := range 2 {
		if a, b := n.received(k), m.received(k); len(a) != len(b) {
			t.Errorf("port %d: %d packets in the logged run, %d in the replay", k, len(a), len(b))
		}
	}
	// The replay plan does not fire at RoCE frames with the same key.
	e := newNet(t, enc.String(), 1)
	for psn := range uint32(20) {
		e.send(t, int(psn%2), pkt{op: roce.RCSendOnly, qpn: 17, psn: psn, payload: 8})
	}
	if got := len(e.received(0)) + len(e.received(1)); got != 20 {
		t.Errorf("the IB replay dropped %d RoCE frames", 20-got)
	}
}

// TestBothFabrics: one injector on the Ethernet segment and the IB subnet
// at once: one schedule, shared counters, one log.
func TestBothFabrics(t *testing.T) {
	const plan = `{"rules":[
		{"name":"every2","action":{"kind":"drop"},"schedule":{"every":2}},
		{"name":"ip","match":{"peer":"10.0.0.2"},"action":{"kind":"duplicate"}},
		{"name":"lid","match":{"peer":"lid:3"},"action":{"kind":"duplicate"}}]}`
	e := newNet(t, plan, 1) // the Ethernet segment, with its injector
	n := &ibNet{inj: e.inj, log: e.log}
	n.attach(t, subnet.New(subnet.Config{}, e.inj.SubnetDecorator()))
	p := pkt{op: roce.RCSendOnly, qpn: 17, psn: 1, payload: 8}
	e.send(t, 0, p) // match 1 of every2: passes, duplicated by ip
	n.send(t, 0, p) // match 2: dropped
	n.send(t, 0, p) // match 3: passes, duplicated by lid
	e.send(t, 0, p) // match 4: dropped
	if got := len(e.received(1)); got != 2 {
		t.Errorf("RoCE: %d frames delivered, want 2", got)
	}
	if got := len(n.received(1)); got != 2 {
		t.Errorf("IB: %d packets delivered, want 2", got)
	}
	st := e.inj.Stats()
	for i, want := range [][2]uint64{{4, 2}, {1, 1}, {1, 1}} {
		if r := st.Rules[i]; r.Matched != want[0] || r.Fired != want[1] {
			t.Errorf("rule %s: matched %d fired %d, want %v", r.Name, r.Matched, r.Fired, want)
		}
	}
	if st.Fired != 4 {
		t.Errorf("fired %d, want 4", st.Fired)
	}
	if c := strings.Count(e.log.String(), `"slid":2`); c != 2 {
		t.Errorf("%d IB lines in the shared log, want 2:\n%s", c, e.log.String())
	}
}

// ibOracle is the reference predicate of FuzzIBMatch: whether a rule with
// these fields matches a packet, from ib.Parse's fields.
type ibOracle struct {
	device, dir string
	qpn         *uint32
	opcode      *roce.Opcode
	class       string
	psn         *[2]uint32
	peer        *uint16
	size        *[2]uint32
}

var ibOwners = map[uint16]string{subnet.SMLID: "sm", 2: "hca0", 3: "hca1"}

func (o *ibOracle) matches(p *ib.Packet, from string) bool {
	op := p.Transport.BTH.Opcode()
	if o.opcode != nil && op != *o.opcode {
		return false
	}
	info, _ := op.Info()
	switch o.class {
	case "send":
		if info.Op != roce.OpSend {
			return false
		}
	case "ack":
		if info.Op != roce.OpAcknowledge && info.Op != roce.OpAtomicAcknowledge {
			return false
		}
	case "nak":
		if op != roce.RCAcknowledge || p.Transport.AETH.Syndrome().Type() == roce.SyndromeACK {
			return false
		}
	case "cm":
		pl := p.Transport.Payload
		if op.Transport() != roce.TransportUD || info.Op != roce.OpSend || p.Transport.BTH.DestQP() != 1 || len(pl) < 24 || pl[1] != 7 {
			return false
		}
	}
	if o.qpn != nil && p.Transport.BTH.DestQP() != *o.qpn {
		return false
	}
	if o.psn != nil {
		// In the range [first, last], walking up from first modulo 2^24.
		psn, first, last := p.Transport.BTH.PSN(), o.psn[0], o.psn[1]
		if (psn+(1<<24)-first)%(1<<24) > (last+(1<<24)-first)%(1<<24) {
			return false
		}
	}
	if n := uint32(len(p.Transport.Payload)); o.size != nil && (n < o.size[0] || n > o.size[1]) {
		return false
	}
	to := ibOwners[p.LRH.DLID()]
	var rx bool
	switch {
	case o.device == "":
		rx = o.dir == "rx"
	case o.dir != "rx" && from == o.device:
	case o.dir != "tx" && to == o.device:
		rx = true
	default:
		return false
	}
	if rx && to == "" {
		return false
	}
	if o.peer != nil {
		lid := p.LRH.DLID()
		if rx {
			lid = p.LRH.SLID()
		}
		if lid != *o.peer {
			return false
		}
	}
	return true
}

// rule is the JSON rule of the oracle's fields.
func (o *ibOracle) rule() string {
	m := map[string]any{}
	if o.device != "" {
		m["device"] = o.device
	}
	if o.dir != "" {
		m["direction"] = o.dir
	}
	if o.qpn != nil {
		m["qpn"] = *o.qpn
	}
	if o.opcode != nil {
		m["opcodes"] = []string{fmt.Sprintf("%#x", uint8(*o.opcode))}
	}
	if o.class != "" {
		m["classes"] = []string{o.class}
	}
	if o.psn != nil {
		m["psn"] = map[string]uint32{"first": o.psn[0], "last": o.psn[1]}
	}
	if o.peer != nil {
		m["peer"] = fmt.Sprintf("lid:%d", *o.peer)
	}
	if o.size != nil {
		m["size"] = map[string]uint32{"min": o.size[0], "max": o.size[1]}
	}
	b, _ := json.Marshal(map[string]any{"rules": []any{map[string]any{"name": "r", "match": m, "action": map[string]string{"kind": "drop"}}}})
	return string(b)
}

// FuzzIBMatch checks the matching of IB packets against a reference
// predicate over ib.Parse's fields: a drop rule built from the fuzzer's
// fields drops a packet (given to the decorator directly, from hca0, hca1
// or the SM's port, past the subnet's own checks) iff the predicate says
// it matches. The packet is the fuzzer's bytes with the CRCs made valid,
// so that ib.Parse sees the fields; one that does not parse never matches
// and is passed on untouched.
func FuzzIBMatch(f *testing.F) {
	seed := func(src int, p pkt) []byte { return ibPacket(f, src, p) }
	f.Add(seed(0, pkt{op: roce.RCSendOnly, qpn: 17, psn: 100, payload: 64}), uint8(0), uint8(0), uint32(17), uint8(4), uint8(1), uint32(90), uint32(110), uint16(3), uint32(0), uint32(100), uint16(0xFFFF))
	f.Add(seed(1, pkt{op: roce.RCAcknowledge, qpn: 5, psn: 1, syndrome: 0x61}), uint8(2), uint8(2), uint32(5), uint8(0x11), uint8(3), uint32(0), uint32(0), uint16(3), uint32(0), uint32(0), uint16(0))
	f.Add(seed(0, pkt{op: roce.UDSendOnly, qpn: 1, psn: 9, payload: 256}), uint8(1), uint8(1), uint32(1), uint8(0x64), uint8(4), uint32(16777215), uint32(10), uint16(2), uint32(24), uint32(300), uint16(0xFFFF))
	f.Fuzz(func(t *testing.T, raw []byte, devSel, dirSel uint8, qpn uint32, op, classSel uint8, psnFirst, psnLast uint32, peer uint16, sizeMin, sizeMax uint32, which uint16) {
		if len(raw) > fabric.FrameSize {
			return
		}
		var o ibOracle
		o.device = []string{"", "hca0", "hca1", "sm"}[devSel%4]
		o.dir = []string{"", "tx", "rx"}[dirSel%3]
		if which&1 != 0 {
			q := qpn & roce.Mask24
			o.qpn = &q
		}
		if which&2 != 0 {
			c := roce.Opcode(op)
			if !c.Valid() {
				return
			}
			o.opcode = &c
		}
		o.class = []string{"", "send", "ack", "nak", "cm"}[classSel%5]
		if which&4 != 0 {
			o.psn = &[2]uint32{psnFirst & roce.Mask24, psnLast & roce.Mask24}
		}
		if which&8 != 0 && peer != 0 && peer != 0xFFFF {
			o.peer = &peer
		}
		if which&16 != 0 && sizeMin <= sizeMax {
			o.size = &[2]uint32{sizeMin % 5000, sizeMax}
			if o.size[0] > o.size[1] {
				return
			}
		}
		plan, err := fault.DecodePlan(strings.NewReader(o.rule()))
		if err != nil {
			return // a rule nothing can match (refused)
		}
		inj, err := fault.NewInjector(plan, fault.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer inj.Close()
		s := subnet.New(subnet.Config{})
		var ports [2]*subnet.Port
		for k := range ports {
			ports[k], _ = s.Attach(fmt.Sprintf("hca%d", k), uint64(0x10+k), func(b []byte) bool { fabric.Release(b); return true })
		}
		var passed [][]byte
		link := inj.SubnetDecorator()(subnet.LinkFunc(func(_ *subnet.Port, b []byte) bool {
			passed = append(passed, b)
			return true
		}))

		pktb := fabric.NewFrame()
		pktb = pktb[:copy(pktb, raw)]
		if _, _, err := ib.ParseLink(pktb); err == nil {
			ib.PutICRC(pktb)
			ib.PutVCRC(pktb)
		}
		orig := slices.Clone(pktb)
		from, fromName := ports[0], "hca0"
		if len(pktb) >= ib.LRHSize && ib.LRH(pktb).SLID() == 3 {
			from, fromName = ports[1], "hca1"
		}
		want := false
		if p, err := ib.Parse(orig); err == nil {
			want = o.matches(&p, fromName)
		}
		link.Send(from, pktb)
		dropped := len(passed) == 0
		if dropped != want {
			t.Fatalf("rule %s on %x from %s: dropped %v, want %v", o.rule(), orig, fromName, dropped, want)
		}
		if !dropped && !bytes.Equal(passed[0], orig) {
			t.Fatal("a packet passed on changed")
		}
		st := inj.Stats()
		if m := st.Rules[0].Matched; m != map[bool]uint64{true: 1}[want] {
			t.Fatalf("matched %d", m)
		}
	})
}
