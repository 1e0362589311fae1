package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/qemu"
)

// faultFlags are the fault-injection flags of "hcaemu run" and "hcaemu
// serve".
type faultFlags struct {
	plan, log, seed, control string
}

func registerFaultFlags(fs *flag.FlagSet) *faultFlags {
	f := &faultFlags{}
	fs.StringVar(&f.plan, "faults", "", "fault plan (JSON, see docs/faults.md) applied to the frames between the HCAs and inside them")
	fs.StringVar(&f.log, "faults-log", "", "write every fault fired as a JSON line to this file (\"hcaemu faults replay\" turns it into a plan)")
	fs.StringVar(&f.seed, "faults-seed", "", "seed of the fault plan's generator (default: the plan's \"seed\", else the clock)")
	fs.StringVar(&f.control, "control", "", "unix socket for live fault control (\"hcaemu faults --control SOCK ...\")")
	return f
}

// enabled reports whether any fault flag was given.
func (f *faultFlags) enabled() bool { return *f != faultFlags{} }

// faultSetup is a running injector with its log and control socket.
type faultSetup struct {
	inj     *fault.Injector
	logFile *os.File
	control *controlSocket
	stderr  io.Writer
}

// start loads the plan, opens the log and listens on the control socket
// (controlPath when --control is not given; "" for none). It prints the
// seed and the control socket to stderr.
func (f *faultFlags) start(stderr io.Writer, controlPath string) (*faultSetup, error) {
	plan := &fault.Plan{}
	if f.plan != "" {
		var err error
		if plan, err = fault.LoadPlan(f.plan); err != nil {
			return nil, fmt.Errorf("--faults: %w", err)
		}
	}
	var opts fault.Options
	if f.seed != "" {
		seed, err := strconv.ParseUint(f.seed, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("--faults-seed %q: want an unsigned integer", f.seed)
		}
		opts.Seed = &seed
	}
	s := &faultSetup{stderr: stderr}
	if f.log != "" {
		lf, err := os.Create(f.log)
		if err != nil {
			return nil, fmt.Errorf("--faults-log: %w", err)
		}
		s.logFile, opts.Log = lf, lf
	}
	inj, err := fault.NewInjector(plan, opts)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("--faults: %w", err)
	}
	s.inj = inj
	if f.control != "" {
		controlPath = f.control
	}
	if controlPath != "" {
		if s.control, err = listenControl(controlPath, inj); err != nil {
			s.close()
			return nil, fmt.Errorf("--control: %w", err)
		}
	}
	msg := fmt.Sprintf("hcaemu: faults: seed %d, %d rules", inj.Seed(), len(plan.Rules))
	if s.control != nil {
		msg += ", control socket " + s.control.Path()
	}
	fmt.Fprintln(stderr, msg)
	return s, nil
}

// listenGuests serves each guest's fault-control port (the guest's
// hcaemu-faults command) on the cluster's per-guest socket.
func (s *faultSetup) listenGuests(cl *qemu.Cluster) error {
	if s == nil || s.control == nil {
		return nil
	}
	for k := range cl.Guests {
		if err := s.control.ListenGuest(cl.FaultsSocketPath(k)); err != nil {
			return fmt.Errorf("guest %d fault-control port: %w", k, err)
		}
	}
	cl.FaultPorts = true
	return nil
}

// decorators returns the fault decorator, or none without faults.
func (s *faultSetup) decorators() []fabric.Decorator {
	if s == nil {
		return nil
	}
	return []fabric.Decorator{s.inj.Decorator()}
}

// ibDecorators returns the fault decorator of the InfiniBand subnet (the
// same plan's), or none without faults.
func (s *faultSetup) ibDecorators() []subnet.Decorator {
	if s == nil {
		return nil
	}
	return []subnet.Decorator{s.inj.SubnetDecorator()}
}

// quiet reports when the fault decorator looks at no frame (nil without
// faults): the HCAs may then skip frames between them.
func (s *faultSetup) quiet() func() bool {
	if s == nil {
		return nil
	}
	return s.inj.Quiet
}

// hooks returns the device fault hooks (nil without faults).
func (s *faultSetup) hooks() func(name string) hca.FaultHook {
	if s == nil {
		return nil
	}
	return s.inj.Device
}

// close stops the control socket, releases held frames, prints each
// rule's counters and closes the log.
func (s *faultSetup) close() error {
	if s == nil {
		return nil
	}
	if s.inj != nil {
		for _, r := range s.inj.Stats().Rules {
			fmt.Fprintf(s.stderr, "hcaemu: faults: rule %s: fired %d of %d matches\n", r.Name, r.Fired, r.Matched)
		}
	}
	var errs []error
	if s.control != nil {
		errs = append(errs, s.control.Close())
	}
	if s.inj != nil {
		errs = append(errs, s.inj.Close())
	}
	if s.logFile != nil {
		errs = append(errs, s.logFile.Close())
	}
	return errors.Join(errs...)
}

// defaultControlPath is the control socket "hcaemu run" listens on when
// --control is not given.
func defaultControlPath() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("hcaemu-%d.faults.sock", os.Getpid()))
}

const faultsUsage = `usage: hcaemu faults --control SOCK add RULE     (RULE: JSON, or @FILE)
       hcaemu faults --control SOCK rm|enable|disable NAME
       hcaemu faults --control SOCK list|stats|clear
       hcaemu faults replay LOG                   print a plan that fires the faults of LOG again
       hcaemu faults check PLAN                   validate a plan file

Live control of the fault plan of a running "hcaemu run" (which prints its
control socket) or "hcaemu serve --control SOCK"; replay and check work on
files. The schema and recipes are in docs/faults.md.`

// faultsMain implements "hcaemu faults".
func faultsMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu faults", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	control := fs.String("control", "", "the control socket of hcaemu run or serve")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, faultsUsage)
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu faults: %v\n%s\n", err, faultsUsage)
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintln(stderr, faultsUsage)
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "hcaemu faults: "+format+"\n%s\n", append(a, faultsUsage)...)
		return 2
	}
	op, operands := rest[0], rest[1:]
	switch op {
	case "replay", "check":
		if len(operands) != 1 {
			return usageErr("%s takes one file", op)
		}
		if op == "check" {
			p, err := fault.LoadPlan(operands[0])
			if err != nil {
				fmt.Fprintf(stderr, "hcaemu faults: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "%s: %d rules\n", operands[0], len(p.Rules))
			return 0
		}
		f, err := os.Open(operands[0])
		if err != nil {
			fmt.Fprintf(stderr, "hcaemu faults: %v\n", err)
			return 1
		}
		defer f.Close()
		p, err := fault.Replay(f)
		if err != nil {
			fmt.Fprintf(stderr, "hcaemu faults: %s: %v\n", operands[0], err)
			return 1
		}
		if err := p.Encode(stdout); err != nil {
			fmt.Fprintf(stderr, "hcaemu faults: %v\n", err)
			return 1
		}
		return 0
	}
	if *control == "" {
		return usageErr("%s needs --control SOCK", op)
	}
	req := fault.Request{Op: op}
	switch op {
	case "add":
		if len(operands) != 1 {
			return usageErr("add takes one rule")
		}
		rule := operands[0]
		if name, ok := strings.CutPrefix(rule, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				fmt.Fprintf(stderr, "hcaemu faults: %v\n", err)
				return 1
			}
			rule = string(b)
		}
		if !json.Valid([]byte(rule)) {
			return usageErr("add: the rule is not JSON: %s", rule)
		}
		req.Rule = json.RawMessage(rule)
	case "rm", "enable", "disable":
		if len(operands) != 1 {
			return usageErr("%s takes a rule's name", op)
		}
		req.Name = operands[0]
	case "list", "stats", "clear":
		if len(operands) != 0 {
			return usageErr("%s takes no operand", op)
		}
	default:
		return usageErr("unknown command %q", op)
	}
	rsp, err := controlCommand(*control, req)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu faults: %v\n", err)
		return 1
	}
	if !rsp.OK {
		fmt.Fprintf(stderr, "hcaemu faults: %s: %s\n", op, rsp.Error)
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	switch {
	case rsp.Stats != nil:
		enc.Encode(rsp.Stats)
	case op == "list":
		if rsp.Rules == nil {
			rsp.Rules = []fault.RuleState{}
		}
		enc.Encode(rsp.Rules)
	case rsp.Name != "":
		fmt.Fprintf(stdout, "%s: %s\n", op, rsp.Name)
	}
	return 0
}

// runFaults is the fault injection of "hcaemu run", set up before the
// first device starts.
var runFaults *faultSetup
