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
// vCPUs, their kernel and modules.
type workloadFlags struct {
	ready      string
	smp        int
	shares     []string
	kernel     string
	modules    string
	kernelTree string
	ulps       string
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
	fs.StringVar(&w.kernel, "kernel", "", "boot this bzImage instead of the provisioned kernel (another release needs --modules)")
	fs.StringVar(&w.modules, "modules", "", "DIR: kernel modules (.ko, searched recursively) replacing the provisioned ones, e.g. a rebuilt vmw_pvrdma.ko")
	fs.StringVar(&w.kernelTree, "kernel-tree", "", "PATH: a kernel build tree: boot its arch/x86/boot/bzImage with the modules built in it")
	fs.StringVar(&w.ulps, "ulp", "", "MODULE,...: RDMA upper-layer protocols to load after vmw_pvrdma, with their dependencies ("+
		strings.Join(qemu.ULPModules, ", ")+")")
}

// customKernel says whether a kernel flag is given.
func (w *workloadFlags) customKernel() bool {
	return w.kernel != "" || w.modules != "" || w.kernelTree != ""
}

// kernelOptions checks the kernel flags' paths (before provisioning).
func (w *workloadFlags) kernelOptions() (*qemu.KernelOptions, error) {
	ulps, err := qemu.ParseULPs(w.ulps)
	if err != nil {
		return nil, fmt.Errorf("--ulp: %v", err)
	}
	if w.kernelTree != "" {
		if w.kernel != "" || w.modules != "" {
			return nil, fmt.Errorf("--kernel-tree replaces --kernel and --modules: give one or the others")
		}
		opts, err := qemu.TreeOptions(w.kernelTree)
		if err != nil {
			return nil, fmt.Errorf("--kernel-tree: %v", err)
		}
		opts.Shares = len(w.shares) > 0
		opts.ULPs = ulps
		return &opts, nil
	}
	if w.kernel == "" && w.modules == "" && len(ulps) == 0 {
		return nil, nil
	}
	if w.kernel != "" {
		if _, err := qemu.KernelRelease(w.kernel); err != nil {
			return nil, fmt.Errorf("--kernel %s: %v", w.kernel, err)
		}
	}
	if w.modules != "" {
		fi, err := os.Stat(w.modules)
		if err != nil {
			return nil, fmt.Errorf("--modules: %v", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("--modules %s: not a directory", w.modules)
		}
	}
	return &qemu.KernelOptions{Kernel: w.kernel, ModulesDir: w.modules, Shares: len(w.shares) > 0, ULPs: ulps}, nil
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
	if _, err := w.kernelOptions(); err != nil {
		return err
	}
	if cl != nil {
		cl.Ready, cl.CPUs, cl.Shares = ready, w.smp, shares
		opts, _ := w.kernelOptions()
		if opts != nil {
			opts.Model = cl.Model
			gk, err := cl.Env.PrepareKernel(*opts)
			if err != nil {
				return err
			}
			cl.Kernel = gk
		}
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
