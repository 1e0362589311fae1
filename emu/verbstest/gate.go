package verbstest

import (
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// gate sits on the wire: per sending port, it lets the first packets
// through, then holds (or drops) the rest until opened.
type gate struct {
	mu    sync.Mutex
	rules map[wireKey]*gateRule
	// tap: copies of the packets from this port that went through.
	tap    wireKey
	tapped []packet
}

type gateRule struct {
	pass    int  // packets still let through
	drop    bool // drop instead of holding
	dropped int
	held    []packet
}

func (g *gate) send(p packet) bool {
	g.mu.Lock()
	rule := g.rules[p.from]
	if p.from == g.tap && (rule == nil || rule.pass > 0) {
		g.tapped = append(g.tapped, p.clone())
	}
	if rule == nil || rule.pass > 0 {
		if rule != nil {
			rule.pass--
		}
		g.mu.Unlock()
		return p.send(p.buf)
	}
	defer g.mu.Unlock()
	if rule.drop {
		rule.dropped++
		fabric.Release(p.buf)
		return true
	}
	rule.held = append(rule.held, p)
	return true
}

// arm starts holding (drop: dropping) the packets from src after the next
// pass ones.
func (g *gate) arm(src wireKey, pass int, drop bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rules[src] = &gateRule{pass: pass, drop: drop}
}

// waitFor waits (bounded) until cond holds of src's packets, letting the
// hosts run.
func (g *gate) waitFor(t *testing.T, src wireKey, what string, cond func(held, dropped int) bool, hosts ...Host) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, h := range hosts {
			h.Sync()
		}
		g.mu.Lock()
		rule := g.rules[src]
		ok := rule != nil && cond(len(rule.held), rule.dropped)
		g.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatalf("gate: no %s", what)
}

// open lets src's packets through again and sends the held ones on, in
// order.
func (g *gate) open(src wireKey) {
	g.mu.Lock()
	var held []packet
	if rule := g.rules[src]; rule != nil {
		held = rule.held
	}
	delete(g.rules, src)
	g.mu.Unlock()
	for _, p := range held {
		p.send(p.buf) // refused: lost, as on a wire
	}
}

// discard releases what the gate still holds (test cleanup).
func (g *gate) discard() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for src, rule := range g.rules {
		for _, p := range rule.held {
			fabric.Release(p.buf)
		}
		delete(g.rules, src)
	}
	for _, p := range g.tapped {
		fabric.Release(p.buf)
	}
	g.tapped = nil
}

// heldPackets parses the packets held from src down to their transport
// packets.
func (g *gate) heldPackets(t *testing.T, src wireKey) []roce.Packet {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	var pkts []roce.Packet
	if rule := g.rules[src]; rule != nil {
		for _, p := range rule.held {
			pkts = append(pkts, parsePacket(t, p))
		}
	}
	return pkts
}

func parsePacket(t *testing.T, p packet) roce.Packet {
	t.Helper()
	pkt, err := p.transport()
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// replay sends a copy of the tapped packet that satisfies match again,
// from the port that sent it (a peer replaying its own packet).
func (g *gate) replay(t *testing.T, match func(roce.Packet) bool) {
	t.Helper()
	g.mu.Lock()
	var again packet
	for _, p := range g.tapped {
		if match(parsePacket(t, p)) {
			again = p.clone()
			break
		}
	}
	g.mu.Unlock()
	if again.buf == nil {
		t.Fatal("gate: no such packet tapped")
	}
	g.send(again)
}

func gatedSwitch(t *testing.T) (*Net, *gate) {
	g := &gate{rules: map[wireKey]*gateRule{}}
	t.Cleanup(g.discard)
	return NewNet(g.send), g
}
