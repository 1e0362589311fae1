package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hcaemu/hcaemu/qemu"
)

const cacheUsage = `usage: hcaemu cache [--json] [--cache DIR]      where the cache is, how big, what it holds
       hcaemu cache clean [--cache DIR]       remove your cache (no root needed)

The cache is the one "hcaemu run" uses: --cache, else $HCAEMU_CACHE, else
/var/cache/hcaemu for root, else /var/cache/hcaemu read-only when it is
complete, else your own $XDG_CACHE_HOME/hcaemu (~/.cache/hcaemu). A cache
that is complete but not yours to write is used read-only: what runs write
then goes to your own cache.

"clean" removes your own cache (the read-only one is left to its owner),
also the files that belong to your subordinate IDs (the root file systems
made in mmdebstrap's unshare mode), inside a user namespace: no root needed.
It refuses while a run or a provisioning uses the cache.
`

// cacheReport is what "hcaemu cache" prints.
type cacheReport struct {
	qemu.CacheInfo
	Usage     qemu.CacheUsage  `json:"usage"`
	WorkUsage *qemu.CacheUsage `json:"work_usage,omitempty"` // the user's own cache, when Dir is read-only
}

func cacheMain(args []string, stdout, stderr io.Writer) int {
	clean := len(args) > 0 && args[0] == "clean"
	name := "hcaemu cache"
	if clean {
		args, name = args[1:], "hcaemu cache clean"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cache := fs.String("cache", "", "cache directory (default: as hcaemu run chooses)")
	if code, ok := parseCommandFlags(fs, args, cacheUsage, stdout, stderr); !ok {
		return code
	}
	choice, err := qemu.SelectCache(*cache)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if clean {
		// The user's own: the work directory (the cache itself unless
		// it is someone else's, used read-only).
		dir := choice.WorkDir
		u := qemu.DiskUsage(dir)
		if err := qemu.CleanCache(dir); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", dir, humanBytes(u.Bytes))
		if choice.ReadOnly {
			fmt.Fprintf(stdout, "left %s as it is (read-only to you)\n", choice.Dir)
		}
		return 0
	}
	r := cacheReport{CacheInfo: qemu.InspectCache(context.Background(), choice), Usage: qemu.DiskUsage(choice.Dir)}
	if choice.ReadOnly {
		w := qemu.DiskUsage(choice.WorkDir)
		r.WorkUsage = &w
	}
	if *asJSON {
		return writeJSON(name, r, stdout, stderr)
	}
	writeCache(stdout, r)
	return 0
}

// parts says what the entries of a cache hold.
var parts = map[string]string{
	"sid": "Debian sid root: QEMU, rdma-core, perftest", "trixie": "Debian trixie root: guest kernel, headers, gcc",
	"guest": "guest kernel, modules, initramfs", "tools": "mmdebstrap", "gomod": "Go module of the initramfs builder",
	"images": "Debian images (--image)", "logs": "provisioning logs", "run": "run directories (sockets, per-run archives)",
	"stamps": "provisioning steps done",
}

func writeCache(w io.Writer, r cacheReport) {
	mode := "read-write"
	if r.ReadOnly {
		mode = "read-only to you"
	}
	fmt.Fprintf(w, "cache:    %s (%s), %s\n", r.Dir, mode, humanBytes(r.Usage.Bytes))
	if r.Usage.Unreadable > 0 {
		fmt.Fprintf(w, "          (%d directories not readable by you are not counted)\n", r.Usage.Unreadable)
	}
	if r.WorkUsage != nil {
		fmt.Fprintf(w, "yours:    %s (runs write here), %s\n", r.WorkDir, humanBytes(r.WorkUsage.Bytes))
	}
	state := "complete, key " + r.Key
	if !r.Complete {
		state = fmt.Sprintf("incomplete (steps done: %v): the next hcaemu run provisions the rest", r.Steps)
	}
	fmt.Fprintf(w, "state:    %s\n", state)
	fmt.Fprintf(w, "holds:\n")
	for _, name := range r.Usage.SortedParts() {
		what := parts[name]
		if what == "" {
			continue
		}
		fmt.Fprintf(w, "  %-8s %9s  %s\n", name, humanBytes(r.Usage.Parts[name]), what)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Images)) {
		fmt.Fprintf(w, "  image %s: %s\n", id, r.Images[id])
	}
	fmt.Fprintf(w, "versions: QEMU %s, guest kernel %s, rdma-core %s, perftest %s\n",
		orDash(r.QEMU), orDash(r.Kernel), orDash(r.RDMACore), orDash(r.Perftest))
	fmt.Fprintf(w, "clean:    hcaemu cache clean (removes %s)\n", r.WorkDir)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanBytes is n in KB, MB or GB (powers of 1000, one decimal).
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
