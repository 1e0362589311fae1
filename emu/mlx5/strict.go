package mlx5

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// Strict mode: the device as a checker of its driver (the core's
// hca.Strict keeps the counts, the log levels and StrictFail's latch).
// Wherever the device refuses or tolerates something the driver did (a
// command field out of range, an EQ or UAR it never handed out, an EQ
// doorbell beyond the producer), it records a finding naming the PRM
// structure and field as mlx5_ifc.h names them, the value and what was
// allowed, then what the driver got. A finding never changes what the
// device answers; only StrictFail adds to it: the device latches fatal
// (the health buffer's syndrome, which the driver's health poll reports)
// and fails every later command with an internal error.

// find records a finding (lock held). outcome says what the driver got
// ("CREATE_EQ failed: status bad parameter(0x3), syndrome 0x4d580060").
func (d *Device) find(kind hca.FindingKind, outcome, format string, args ...any) {
	f := hca.Finding{Device: d.name, Kind: kind, Text: fmt.Sprintf(format, args...) + ": " + outcome}
	d.strict.Record(d.log, f, d.latchFatal)
}

// latchFatal is strict mode's DEVICE_FATAL: what firmware shows when it
// dies (a syndrome in the health buffer), and no more commands.
func (d *Device) latchFatal() {
	d.core.Fatal = true
	d.seg.synd = ifc.HealthSyndFWErr
}

// Findings returns how many findings of each kind the device recorded
// since it was created (resets do not clear them).
func (d *Device) Findings() [hca.NumFindingKinds]uint64 { return d.strict.Counts() }
