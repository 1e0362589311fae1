package hca

import "io"

// Observed is a device as the tools around a running HCA see it, whatever
// its model: hcaemu inspect (what it holds), trace (what it does) and the
// Prometheus metrics (what it counted). Every device model implements it,
// so the command line serves every model the same way.
type Observed interface {
	// Name is the device's name (hca0), as traces, logs and fault plans
	// call it.
	Name() string
	// Model names the device model ("pvrdma", "mlx5").
	Model() string
	// SetTracer makes the device report its steps to t; nil stops it.
	SetTracer(t Tracer)
	// CoreStats are the device's counters in the core's vocabulary, and
	// each live QP's by QPN.
	CoreStats() (DeviceStats, map[uint32]QPStats)
	// ModelStats are the counters only this model keeps.
	ModelStats() []NamedCount
	// Observe is what the device holds, for hcaemu inspect.
	Observe() Observation
}

// NamedCount is a counter of one model: its name (snake case, the
// metric's name without the hcaemu_<model>_ prefix and _total), what it
// counts, and its value.
type NamedCount struct {
	Name, Help string
	Value      uint64
}

// Observation is what a device held at one moment, in the sections hcaemu
// inspect names ("devices" is all of it).
type Observation interface {
	// Section is the part of the state what names, as JSON values; false
	// when the model has no such section.
	Section(what string) (any, bool)
	// Print writes that section as hcaemu inspect prints it, indented
	// under the device's name.
	Print(w io.Writer, what string)
}
