package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hcaemu/hcaemu/qemu"
)

// maxCPUs bounds --smp: each vCPU is a host thread (TCG) or a KVM vCPU.
const maxCPUs = 32

// workloadFlags are the flags of "hcaemu run" that shape the guests'
// workload: when guests >= 1 start, the host directories they share, their
// vCPUs.
type workloadFlags struct {
	ready  string
	smp    int
	shares []string
}

// register adds the flags to fs.
func (w *workloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.ready, "ready", string(qemu.ReadyListen),
		"when guests >= 1 start their command: when guest 0's has a new listening TCP or rdma_cm socket (listen), "+
			"has started (started), or printed a line HCAEMU-READY or ran hcaemu-ready (marker)")
	fs.IntVar(&w.smp, "smp", 1, fmt.Sprintf("vCPUs per guest (1..%d)", maxCPUs))
	fs.Func("share", "HOSTDIR[:GUESTDIR]: mount a host directory read-write in every guest (virtio-9p; default GUESTDIR "+
		qemu.DefaultShareDir+"; repeatable)", func(s string) error {
		w.shares = append(w.shares, s)
		return nil
	})
}

// apply validates the flags and sets them on cl. Its errors are one line
// naming the flag.
func (w *workloadFlags) apply(cl *qemu.Cluster) error {
	ready, err := qemu.ParseReadiness(w.ready)
	if err != nil {
		return fmt.Errorf("--ready: %v", err)
	}
	if w.smp < 1 || w.smp > maxCPUs {
		return fmt.Errorf("--smp must be between 1 and %d, not %d", maxCPUs, w.smp)
	}
	var shares []qemu.Share
	guestDirs := map[string]bool{}
	for _, s := range w.shares {
		sh, err := qemu.ParseShare(s)
		if err != nil {
			return fmt.Errorf("--share: %v", err)
		}
		if guestDirs[sh.GuestDir] {
			return fmt.Errorf("--share %s: guest directory %s is used twice", s, sh.GuestDir)
		}
		guestDirs[sh.GuestDir] = true
		shares = append(shares, sh)
	}
	if len(shares) > 8 {
		return fmt.Errorf("--share: at most 8 shares, not %d", len(shares))
	}
	if cl != nil {
		cl.Ready, cl.CPUs, cl.Shares = ready, w.smp, shares
	}
	return nil
}

// checkOutputPath checks that the directory a flag's output file goes into
// exists, so a typo fails before the guests boot.
func checkOutputPath(flagName, path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--%s %s: directory %s: %v", flagName, path, dir, strings.TrimPrefix(err.Error(), "stat "+dir+": "))
	}
	if !fi.IsDir() {
		return fmt.Errorf("--%s %s: %s is not a directory", flagName, path, dir)
	}
	return nil
}
