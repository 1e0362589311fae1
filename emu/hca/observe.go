package hca

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

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
	// Sections are the parts of the state, as JSON values.
	Sections() Sections
	// Print writes that section as hcaemu inspect prints it, indented
	// under the device's name, its columns ended by tabs (w is a
	// tabwriter's).
	Print(w io.Writer, what string)
}

// Sections are the parts of a device's state hcaemu inspect names (nil:
// the model has no such part).
type Sections struct {
	Devices, Ports, GIDs, PDs, MRs, CQs, QPs, SRQs, EQs, Stats any
}

// Get is the section what names ("devices", "ports", "gids", "pds",
// "mrs", "cqs", "qps", "srqs", "eqs", "stats"), false for none.
func (s *Sections) Get(what string) (any, bool) {
	v, known := map[string]any{"devices": s.Devices, "ports": s.Ports, "gids": s.GIDs, "pds": s.PDs, "mrs": s.MRs,
		"cqs": s.CQs, "qps": s.QPs, "srqs": s.SRQs, "eqs": s.EQs, "stats": s.Stats}[what]
	return v, known && v != nil
}

// WCStatusNames are the ibv_wc_status names (enum ibv_wc_status, without
// IBV_WC_), by value: what traces, logs and fault plans call a
// completion's status.
var WCStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
	"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR",
	"RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
	"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR",
}

// WCStatusName is the name of ibv_wc_status s ("?" beyond them).
func WCStatusName(s uint32) string {
	if int(s) < len(WCStatusNames) {
		return WCStatusNames[s]
	}
	return "?"
}

// SortCommands orders command counts by name, then errno.
func SortCommands(c []CommandCount) {
	slices.SortFunc(c, func(a, b CommandCount) int {
		if n := strings.Compare(a.Command, b.Command); n != 0 {
			return n
		}
		return int(a.Errno) - int(b.Errno)
	})
}

// FindingCounts are the findings counted by kind, by kind name (the kinds
// never found left out).
func FindingCounts(counts [NumFindingKinds]uint64) map[string]uint64 {
	m := map[string]uint64{}
	for k, n := range counts {
		if n > 0 {
			m[FindingKind(k).String()] = n
		}
	}
	return m
}

// PrintCommands writes the command counts and findings of hcaemu inspect
// stats (tab-separated, for a tabwriter).
func PrintCommands(w io.Writer, cmds []CommandCount, findings map[string]uint64) {
	for _, c := range cmds {
		fmt.Fprintf(w, "  command\t%s errno %d\t%d\n", c.Command, c.Errno, c.Count)
	}
	for _, k := range slices.Sorted(maps.Keys(findings)) {
		fmt.Fprintf(w, "  findings\t%s %d\n", k, findings[k])
	}
}
