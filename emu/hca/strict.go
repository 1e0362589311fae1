package hca

import "fmt"

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
