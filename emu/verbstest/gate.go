package verbstest

import (
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// gate sits on the fabric: per source MAC, it lets the first frames
// through, then holds (or drops) the rest until opened.
type gate struct {
	mu    sync.Mutex
	next  fabric.Link
	rules map[[6]byte]*gateRule
	// tap: copies of the frames from this MAC that went through.
	tap    [6]byte
	tapped []heldFrame
}

type gateRule struct {
	pass    int  // frames still let through
	drop    bool // drop instead of holding
	dropped int
	held    []heldFrame
}

type heldFrame struct {
	from  *fabric.Port
	frame []byte
}

func (g *gate) decorator(next fabric.Link) fabric.Link {
	g.next = next
	return fabric.LinkFunc(g.send)
}

func (g *gate) send(from *fabric.Port, frame []byte) bool {
	g.mu.Lock()
	rule := g.rules[from.MAC()]
	if from.MAC() == g.tap && (rule == nil || rule.pass > 0) {
		g.tapped = append(g.tapped, heldFrame{from, fabric.Clone(frame)})
	}
	if rule == nil || rule.pass > 0 {
		if rule != nil {
			rule.pass--
		}
		g.mu.Unlock()
		return g.next.Send(from, frame)
	}
	defer g.mu.Unlock()
	if rule.drop {
		rule.dropped++
		fabric.Release(frame)
		return true
	}
	rule.held = append(rule.held, heldFrame{from, frame})
	return true
}

// arm starts holding (drop: dropping) the frames from src after the next
// pass ones.
func (g *gate) arm(src [6]byte, pass int, drop bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rules[src] = &gateRule{pass: pass, drop: drop}
}

// waitFor waits (bounded) until cond holds of src's frames, letting the
// hosts run.
func (g *gate) waitFor(t *testing.T, src [6]byte, what string, cond func(held, dropped int) bool, hosts ...Host) {
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

// open lets src's frames through again and sends the held ones on, in
// order.
func (g *gate) open(src [6]byte) {
	g.mu.Lock()
	var held []heldFrame
	if rule := g.rules[src]; rule != nil {
		held = rule.held
	}
	delete(g.rules, src)
	g.mu.Unlock()
	for _, f := range held {
		g.next.Send(f.from, f.frame) // refused: lost, as on a wire
	}
}

// discard releases what the gate still holds (test cleanup).
func (g *gate) discard() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for src, rule := range g.rules {
		for _, f := range rule.held {
			fabric.Release(f.frame)
		}
		delete(g.rules, src)
	}
	for _, f := range g.tapped {
		fabric.Release(f.frame)
	}
	g.tapped = nil
}

// heldPackets parses the frames held from src.
func (g *gate) heldPackets(t *testing.T, src [6]byte) []roce.Packet {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	var pkts []roce.Packet
	if rule := g.rules[src]; rule != nil {
		for _, f := range rule.held {
			pkts = append(pkts, parseFrame(t, f.frame))
		}
	}
	return pkts
}

func parseFrame(t *testing.T, frame []byte) roce.Packet {
	t.Helper()
	u, err := roce.Unframe(frame)
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := roce.Parse(u.IB)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// replay sends a copy of the tapped frame that satisfies match again, from
// the port that sent it (a peer replaying its own packet).
func (g *gate) replay(t *testing.T, match func(roce.Packet) bool) {
	t.Helper()
	g.mu.Lock()
	var again heldFrame
	for _, f := range g.tapped {
		if match(parseFrame(t, f.frame)) {
			again = heldFrame{f.from, fabric.Clone(f.frame)}
			break
		}
	}
	g.mu.Unlock()
	if again.frame == nil {
		t.Fatal("gate: no such frame tapped")
	}
	g.send(again.from, again.frame)
}

func gatedSwitch(t *testing.T) (*fabric.Switch, *gate) {
	g := &gate{rules: map[[6]byte]*gateRule{}}
	t.Cleanup(g.discard)
	return fabric.NewSwitch(g.decorator), g
}
