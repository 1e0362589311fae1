package verbstest

import (
	"fmt"
	"sync"

	"github.com/hcaemu/hcaemu/dma"
)

// WriteWatch is guest memory as a device reaches it, with every device write
// checked against the places the device may write: a test hands the device a
// WriteWatch instead of the driver's RAM, names the allowed ranges (the
// device's rings, the index fields it owns, the memory regions a write may
// land in) and arms it; from then on a write (WriteAt, or Access asking for
// a writable view) not wholly inside the allowed ranges is recorded as a
// violation. The write itself goes through, so the device behaves as it
// would on real guest memory. The guest's own stores (the driver writing RAM
// directly) are not seen. It knows no model: a model's Host allows its own
// structures (HostOpts.Watch), a test the regions it registers.
type WriteWatch struct {
	Mem dma.Memory

	mu         sync.Mutex
	armed      bool
	allowed    []watchRange
	violations []string
	dropped    int
}

type watchRange struct {
	name     string
	gpa, end uint64
}

// maxViolations bounds the violations a WriteWatch keeps (it counts the rest).
const maxViolations = 16

// NewWriteWatch wraps mem; it checks nothing until Arm.
func NewWriteWatch(mem dma.Memory) *WriteWatch { return &WriteWatch{Mem: mem} }

// Allow lets the device write [gpa, gpa+n), under name (for Revoke and
// reports).
func (w *WriteWatch) Allow(name string, gpa, n uint64) {
	end, ok := dma.End(gpa, n)
	if !ok {
		panic("verbstest: WriteWatch range overflows")
	}
	w.mu.Lock()
	w.allowed = append(w.allowed, watchRange{name: name, gpa: gpa, end: end})
	w.mu.Unlock()
}

// Revoke removes every range allowed under name: a write there from now on
// is a violation.
func (w *WriteWatch) Revoke(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.allowed[:0]
	for _, r := range w.allowed {
		if r.name != name {
			kept = append(kept, r)
		}
	}
	w.allowed = kept
}

// Arm starts checking writes.
func (w *WriteWatch) Arm() {
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
}

// Violations returns the recorded violations (at most 16, then a count of
// the rest).
func (w *WriteWatch) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]string(nil), w.violations...)
	if w.dropped > 0 {
		out = append(out, fmt.Sprintf("... and %d more", w.dropped))
	}
	return out
}

// covered reports whether [gpa, end) lies in the union of the allowed
// ranges; w.mu is held.
func (w *WriteWatch) covered(gpa, end uint64) bool {
	for pos := gpa; pos < end; {
		next := pos
		for _, r := range w.allowed {
			if r.gpa <= pos && pos < r.end && r.end > next {
				next = r.end
			}
		}
		if next == pos {
			return false
		}
		pos = next
	}
	return true
}

func (w *WriteWatch) check(gpa, n uint64) {
	end, ok := dma.End(gpa, n)
	if !ok || n == 0 {
		return // the memory below refuses it, or nothing is written
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.covered(gpa, end) {
		return
	}
	if len(w.violations) == maxViolations {
		w.dropped++
		return
	}
	w.violations = append(w.violations, fmt.Sprintf("device wrote [%#x, +%#x) outside the places it may write", gpa, n))
}

// ReadAt implements dma.Memory.
func (w *WriteWatch) ReadAt(p []byte, gpa uint64) error { return w.Mem.ReadAt(p, gpa) }

// WriteAt implements dma.Memory, checking the write.
func (w *WriteWatch) WriteAt(p []byte, gpa uint64) error {
	w.check(gpa, uint64(len(p)))
	return w.Mem.WriteAt(p, gpa)
}

// Access implements dma.Memory, checking a writable access.
func (w *WriteWatch) Access(gpa, n uint64, write bool, fn func(b []byte)) error {
	if write {
		w.check(gpa, n)
	}
	return w.Mem.Access(gpa, n, write, fn)
}
