package fault

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Replay turns a fault log into a plan that fires exactly the logged faults
// again: one rule per firing, matching the frame by device, direction, QPN,
// PSN, opcode and occurrence (an InfiniBand packet also by its peer's LID,
// "lid:N"; a device or transport action: the n-th event of its point at
// its device), firing once. A delay fires with the delay
// drawn in the logged run. The plan keeps the logged seed.
func Replay(log io.Reader) (*Plan, error) {
	plan := &Plan{Rules: []Rule{}}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var line logLine
		if err := strictDecode(strings.NewReader(text), &line); err != nil {
			return nil, fmt.Errorf("fault log line %d: %w", n, err)
		}
		if line.Event == "start" {
			if line.Seed != nil && plan.Seed == nil {
				seed := *line.Seed
				plan.Seed = &seed
			}
			continue
		}
		if line.Event != "" {
			return nil, fmt.Errorf("fault log line %d: unknown event %q", n, line.Event)
		}
		if line.Point != "" {
			// A device point: the n-th event of that point at the device.
			if line.Action == nil || line.Device == "" || line.Occurrence == 0 {
				return nil, fmt.Errorf("fault log line %d: a device firing needs device, point, occurrence and action", n)
			}
			rule := Rule{
				Name:     fmt.Sprintf("replay%d-%s", len(plan.Rules), line.Rule),
				Match:    Match{Device: line.Device, Point: line.Point, Occurrence: line.Occurrence},
				Action:   *line.Action,
				Schedule: Schedule{Times: 1},
			}
			if _, err := compileRule(&rule); err != nil {
				return nil, fmt.Errorf("fault log line %d: %w", n, err)
			}
			plan.Rules = append(plan.Rules, rule)
			continue
		}
		if line.Action == nil || line.QPN == nil || line.PSN == nil || line.Device == "" || line.Dir == "" || line.Opcode == "" || line.Occurrence == 0 {
			return nil, fmt.Errorf("fault log line %d: a firing needs device, dir, qpn, psn, opcode, occurrence and action", n)
		}
		action := *line.Action
		if action.Kind == ActDelay {
			action.Delay, action.Jitter = line.Delay, 0
		}
		psn := *line.PSN
		qpn := *line.QPN
		rule := Rule{
			Name: fmt.Sprintf("replay%d-%s", len(plan.Rules), line.Rule),
			Match: Match{Device: line.Device, Direction: line.Dir, QPN: &qpn, Opcodes: []string{line.Opcode},
				PSN: &PSNRange{First: psn, Last: psn}, Occurrence: line.Occurrence},
			Action:   action,
			Schedule: Schedule{Times: 1},
		}
		if line.SLID != 0 || line.DLID != 0 {
			// An InfiniBand packet: only the subnet's packets match, by
			// the peer's LID.
			peer := line.DLID
			if line.Dir == "rx" {
				peer = line.SLID
			}
			rule.Match.Peer = fmt.Sprintf("lid:%d", peer)
		}
		if _, err := compileRule(&rule); err != nil {
			return nil, fmt.Errorf("fault log line %d: %w", n, err)
		}
		plan.Rules = append(plan.Rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fault log: %w", err)
	}
	return plan, nil
}

// Encode writes the plan as indented JSON (a file LoadPlan reads back).
func (p *Plan) Encode(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}
