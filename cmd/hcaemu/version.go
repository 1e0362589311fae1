package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/hcaemu/hcaemu/qemu"
)

// buildInfo is what the binary knows of itself.
type buildInfo struct {
	Module    string `json:"module"`
	Version   string `json:"version"`            // the module version, "(devel)" for a build in a checkout
	Revision  string `json:"revision,omitempty"` // the VCS revision it was built from
	Time      string `json:"revision_time,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	GoVersion string `json:"go"`
}

// versionReport is what "hcaemu version" prints.
type versionReport struct {
	Hcaemu buildInfo      `json:"hcaemu"`
	Cache  qemu.CacheInfo `json:"cache"`
}

func readBuildInfo(bi *debug.BuildInfo, ok bool) buildInfo {
	if !ok {
		return buildInfo{Module: "github.com/hcaemu/hcaemu", Version: "unknown"}
	}
	b := buildInfo{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the binary's one line: module version, revision.
func (b buildInfo) String() string {
	s := "hcaemu " + b.Version
	if b.Revision != "" {
		s += " " + b.Revision
		if b.Modified {
			s += " (modified)"
		}
		if b.Time != "" {
			s += " " + b.Time
		}
	}
	if b.GoVersion != "" {
		s += " " + b.GoVersion
	}
	if b.Revision == "" && b.Version == "(devel)" {
		s += " (no VCS revision: built outside a git checkout or with -buildvcs=false)"
	}
	return s
}

const versionUsage = `usage: hcaemu version [--json] [--cache DIR]

Prints the version (module version and VCS revision) of this hcaemu and, for
the cache a run would use (as "hcaemu run" chooses it), the QEMU, guest
kernel, rdma-core and perftest versions, the cache key and the accelerator
guests get (kvm or tcg, the KVM probe's verdict). Changes and boots nothing.
Put it in bug reports.
`

func versionMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cache := fs.String("cache", "", "cache directory (default: as hcaemu run chooses)")
	if code, ok := parseCommandFlags(fs, args, versionUsage, stdout, stderr); !ok {
		return code
	}
	choice, err := qemu.SelectCache(*cache)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu version: %v\n", err)
		return 1
	}
	r := versionReport{Hcaemu: readBuildInfo(debug.ReadBuildInfo()), Cache: qemu.InspectCache(context.Background(), choice)}
	if *asJSON {
		return writeJSON("hcaemu version", r, stdout, stderr)
	}
	writeVersion(stdout, r)
	return 0
}

// writeVersion prints the report as text, one "name: value" line each.
func writeVersion(w io.Writer, r versionReport) {
	c := r.Cache
	fmt.Fprintln(w, r.Hcaemu)
	line := func(name, value string) {
		if value == "" {
			value = "-"
		}
		fmt.Fprintf(w, "%-13s %s\n", name+":", value)
	}
	mode := "read-write"
	if c.ReadOnly {
		mode = "read-only; runs write in " + c.WorkDir
	}
	line("cache", c.Dir+" ("+mode+")")
	if c.Complete {
		line("cache key", c.Key)
	} else {
		done := strings.Join(c.Steps, ",")
		if done == "" {
			done = "nothing"
		}
		line("cache key", "none: not provisioned (done: "+done+"; the next hcaemu run provisions the rest)")
	}
	qemuV := c.QEMU
	if c.HostQEMU != "" {
		qemuV = "host " + c.HostQEMU
	} else if qemuV != "" {
		qemuV = "qemu-system-x86 " + qemuV + " (Debian sid root)"
	}
	line("qemu", qemuV)
	kernel := c.Kernel
	if c.KernelPackage != "" {
		kernel += " (" + c.KernelPackage + ")"
	}
	line("guest kernel", kernel)
	line("rdma-core", c.RDMACore)
	line("perftest", c.Perftest)
	line("accel", c.Accel)
}
