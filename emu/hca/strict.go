package hca

import (
	"fmt"
	"log/slog"
	"sync/atomic"
)

// Strict mode: the device as a checker of its driver. Wherever a device
// refuses or tolerates something its driver did (a command field out of
// range, a handle it never handed out, a ring index beyond the ring, a WQE
// the driver should never have posted), it records a finding: one line that
// names the object, the structure and field as the model's driver headers
// name them, the value and what was allowed, and what the driver got back.
// A finding never changes what the device answers; only StrictFail adds to
// it.

// StrictMode says what the device does with a finding.
type StrictMode uint8

const (
	// StrictWarn logs each finding at Warn (rate-limited per kind) and
	// counts it. The default.
	StrictWarn StrictMode = iota
	// StrictOff counts findings and logs them at Debug.
	StrictOff
	// StrictFail does what StrictWarn does, and at the first finding
	// latches the device: it declares DEVICE_FATAL (the driver passes it
	// on as IB_EVENT_DEVICE_FATAL, and every later command fails with EIO)
	// and reports the finding to Config.OnFinding, so a run stops with a
	// non-zero exit at the driver's first mistake.
	StrictFail
)

var strictModeNames = [...]string{StrictWarn: "warn", StrictOff: "off", StrictFail: "fail"}

func (m StrictMode) String() string {
	if int(m) < len(strictModeNames) {
		return strictModeNames[m]
	}
	return fmt.Sprintf("StrictMode(%d)", m)
}

// ParseStrictMode parses "warn", "off" or "fail".
func ParseStrictMode(s string) (StrictMode, error) {
	for m, name := range strictModeNames {
		if s == name {
			return StrictMode(m), nil
		}
	}
	return 0, fmt.Errorf("strict mode %q: want warn, off or fail", s)
}

// FindingKind classifies a driver mistake.
type FindingKind uint8

const (
	// FindingCommand: a command field out of range or inconsistent (a CQ
	// size that is not a power of two, MR access flags, QP capabilities).
	FindingCommand FindingKind = iota
	// FindingHandle: a command or doorbell names an object that does not
	// exist, or that belongs to another context.
	FindingHandle
	// FindingPageDir: a page directory or page list that is misaligned,
	// short, or points outside guest RAM.
	FindingPageDir
	// FindingQPState: an illegal QP state transition or attribute mask.
	FindingQPState
	// FindingRingIndex: a producer or consumer index beyond its ring.
	FindingRingIndex
	// FindingDoorbell: a doorbell for a QP that cannot use it (RESET,
	// ERR), or through a UAR page that is not the object's.
	FindingDoorbell
	// FindingWQE: a WQE with an opcode, SGE count or header the QP cannot
	// take.
	FindingWQE
	// FindingCQOverrun: a completion found its CQ full (the consumer did
	// not poll, or the CQ is smaller than the queues that complete to it).
	FindingCQOverrun
	// FindingRegister: a register written with the wrong width, an unknown
	// value, or at the wrong time (before the DSR, before ACTIVATE).
	FindingRegister
	// NumFindingKinds counts the kinds.
	NumFindingKinds
)

var findingKindNames = [...]string{
	FindingCommand: "command", FindingHandle: "handle", FindingPageDir: "page_dir",
	FindingQPState: "qp_state", FindingRingIndex: "ring_index", FindingDoorbell: "doorbell",
	FindingWQE: "wqe", FindingCQOverrun: "cq_overrun", FindingRegister: "register",
}

func (k FindingKind) String() string {
	if int(k) < len(findingKindNames) {
		return findingKindNames[k]
	}
	return fmt.Sprintf("FindingKind(%d)", k)
}

// Finding is one driver mistake the device saw.
type Finding struct {
	Device string
	Kind   FindingKind
	// Text names the object, the field, the value and what was allowed,
	// then what the driver got: "qp 5 sq[7] pvrdma_sq_wqe_hdr.num_sge=9 >
	// max_send_sge=4: completed with LOC_LEN_ERR".
	Text string
}

func (f Finding) String() string { return f.Device + ": " + f.Kind.String() + ": " + f.Text }

// Strict is a device's strict-mode bookkeeping: its mode, the findings it
// counted by kind over its life (resets do not clear them: they count the
// driver's mistakes over the whole run) and StrictFail's latch. The model
// names the structure and field in each Finding; Strict logs, counts and
// latches. Record is called under the device lock; Counts may be read
// without it.
type Strict struct {
	Mode StrictMode
	// Report, if set, gets StrictFail's first finding.
	Report func(Finding)
	counts [NumFindingKinds]atomic.Uint64
	// latched: StrictFail saw its first finding (device lock).
	latched bool
}

// Record counts f and logs it as the mode says: at Debug under StrictOff,
// else at Warn (log should be rate-limited per message: one message per
// kind). At StrictFail's first finding it latches, logs that, calls fatal
// (the model declares itself DEVICE_FATAL in its own terms) and then
// Report.
func (s *Strict) Record(log *slog.Logger, f Finding, fatal func()) {
	if int(f.Kind) < len(s.counts) {
		s.counts[f.Kind].Add(1)
	}
	if s.Mode == StrictOff {
		log.Debug("driver mistake: "+f.Kind.String(), "finding", f.Text)
		return
	}
	log.Warn("driver mistake: "+f.Kind.String(), "finding", f.Text)
	if s.Mode != StrictFail || s.latched {
		return
	}
	s.latched = true
	log.Error("strict mode: the device is latched in DEVICE_FATAL at the driver's first mistake", "finding", f.Text)
	fatal()
	if s.Report != nil {
		s.Report(f)
	}
}

// Latched reports whether StrictFail has latched (device lock): the
// device stays fatal across resets.
func (s *Strict) Latched() bool { return s.latched }

// Counts returns how many findings of each kind were recorded.
func (s *Strict) Counts() [NumFindingKinds]uint64 {
	var out [NumFindingKinds]uint64
	for k := range out {
		out[k] = s.counts[k].Load()
	}
	return out
}
