package main

import (
	"flag"
	"sync"

	"github.com/hcaemu/hcaemu/emu/hca"
)

// strictFlag is --strict: what the devices do when a driver breaks a rule
// (hca.StrictMode).
type strictFlag struct{ mode hca.StrictMode }

func (f *strictFlag) String() string { return f.mode.String() }
func (f *strictFlag) Set(s string) error {
	m, err := hca.ParseStrictMode(s)
	if err != nil {
		return err
	}
	f.mode = m
	return nil
}

func registerStrictFlag(fs *flag.FlagSet) *strictFlag {
	f := &strictFlag{}
	fs.Var(f, "strict", "what the HCAs do when the driver breaks a rule: warn (log each finding, the default), off (count only) or fail (stop at the first finding with a non-zero exit)")
	return f
}

// strictLatch keeps the first finding of a process's devices in
// --strict fail mode and stops the process's work (serve's listeners,
// run's guests).
type strictLatch struct {
	mu    sync.Mutex
	first *hca.Finding
	stop  func()
}

// report is pvrdma.Config.OnFinding: it runs under a device lock, so it only
// records and cancels.
func (l *strictLatch) report(f hca.Finding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first != nil {
		return
	}
	l.first = &f
	if l.stop != nil {
		l.stop()
	}
}

// finding returns the first finding, if one stopped the process.
func (l *strictLatch) finding() (hca.Finding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		return hca.Finding{}, false
	}
	return *l.first, true
}
