package qemu

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// CacheInfo describes a cache: what it holds and which versions.
type CacheInfo struct {
	// Dir is the cache; WorkDir where runs write (Dir unless ReadOnly).
	Dir      string `json:"dir"`
	WorkDir  string `json:"work_dir"`
	ReadOnly bool   `json:"read_only"`
	// Complete: every step is done with this hcaemu's recipes.
	Complete bool `json:"complete"`
	// Key identifies what was provisioned (the steps' keys and stamps);
	// "" when incomplete.
	Key string `json:"key,omitempty"`
	// Steps are the steps done (with the current recipes), in order.
	Steps []string `json:"steps"`
	// Versions of what the guests run ("" when unknown).
	QEMU          string `json:"qemu,omitempty"`
	HostQEMU      string `json:"host_qemu,omitempty"` // the host's QEMU, used instead of the sid root's
	Kernel        string `json:"kernel,omitempty"`
	KernelPackage string `json:"kernel_package,omitempty"`
	RDMACore      string `json:"rdma_core,omitempty"`
	Perftest      string `json:"perftest,omitempty"`
	// Images are the Debian images' package lists, by id.
	Images map[string]string `json:"images,omitempty"`
	// Accel is the accelerator verdict for this user (see AccelVerdict).
	Accel string `json:"accel"`
}

// stepNames are the base environment's steps, in order.
var stepNames = []string{"tools", "sid", "trixie", "modules", "initramfs"}

// InspectCache reads what choice's cache holds. It changes nothing and
// boots nothing.
func InspectCache(ctx context.Context, choice CacheChoice) CacheInfo {
	p := newProvisioner(choice.Dir, choice.WorkDir, "", nil)
	info := CacheInfo{Dir: choice.Dir, WorkDir: choice.WorkDir, ReadOnly: choice.ReadOnly}
	t, s, x, m, i := p.keys()
	keys := []string{t, s, x, m, i}
	var stamps strings.Builder
	for k, name := range stepNames {
		if p.st.done(name, keys[k]) {
			info.Steps = append(info.Steps, name)
		}
		stamps.WriteString(p.st.stamp(name))
	}
	info.Complete = len(info.Steps) == len(stepNames)
	if info.Complete {
		info.Key = hash(stamps.String())
	}
	sid := dpkgVersions(p.path(dirSid, "var", "lib", "dpkg", "status"), "qemu-system-x86", "ibverbs-utils", "perftest")
	info.QEMU, info.RDMACore, info.Perftest = sid["qemu-system-x86"], sid["ibverbs-utils"], sid["perftest"]
	if q, ok := hostQEMU(ctx); ok {
		if out, err := exec.CommandContext(ctx, q, "--version").Output(); err == nil {
			info.HostQEMU = q + " " + strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	if b, err := os.ReadFile(p.path(dirGuest, "kernel.release")); err == nil {
		info.Kernel = strings.TrimSpace(string(b))
		if info.Kernel != "" {
			pkg := "linux-image-" + info.Kernel
			if v := dpkgVersions(p.path(dirTrixie, "var", "lib", "dpkg", "status"), pkg)[pkg]; v != "" {
				info.KernelPackage = pkg + " " + v
			}
		}
	}
	info.Images = map[string]string{}
	for _, dir := range []string{choice.Dir, choice.WorkDir} {
		ids, _ := os.ReadDir(filepath.Join(dir, dirImages))
		for _, id := range ids {
			if b, err := os.ReadFile(filepath.Join(dir, dirImages, id.Name(), "packages")); err == nil {
				info.Images[id.Name()] = strings.Join(strings.Fields(string(b)), ",")
			}
		}
	}
	info.Accel = AccelVerdict(choice, p.path(dirGuest, "vmlinuz"))
	return info
}

// dpkgVersions returns the installed versions of pkgs from a dpkg status
// file.
func dpkgVersions(status string, pkgs ...string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(status)
	if err != nil {
		return out
	}
	defer f.Close()
	want := map[string]bool{}
	for _, p := range pkgs {
		want[p] = true
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var pkg string
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			pkg = ""
		case strings.HasPrefix(l, "Package: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(l, "Package: "))
		case strings.HasPrefix(l, "Version: ") && want[pkg]:
			out[pkg] = strings.TrimSpace(strings.TrimPrefix(l, "Version: "))
		}
	}
	return out
}

// AccelVerdict says which accelerator runs of this user get and why,
// without booting anything: $HCAEMU_ACCEL, else TCG when /dev/kvm is not
// usable by this user, else the verdict of the KVM probe guest (cached per
// host boot), else that the next run probes.
func AccelVerdict(choice CacheChoice, kernel string) string {
	if a := os.Getenv("HCAEMU_ACCEL"); a != "" {
		return a + " (HCAEMU_ACCEL)"
	}
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Sprintf("tcg (/dev/kvm is not usable: %v)", unwrapPath(err))
	}
	kvm.Close()
	q := "/usr/bin/qemu-system-x86_64"
	if hq, ok := hostQEMU(context.Background()); ok {
		q = hq
	}
	if a, ok := cachedAccel(filepath.Join(choice.WorkDir, "accel"), kernel, q); ok {
		if a == "kvm" {
			return "kvm (/dev/kvm is usable and a probe guest booted with it)"
		}
		return "tcg (/dev/kvm is usable but a probe guest did not boot with it: nested virtualization?)"
	}
	return "not probed yet (/dev/kvm is usable: the next run boots a probe guest to decide between kvm and tcg)"
}

func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// accelKey is the key of the KVM probe's cached verdict: the host's boot,
// the kernel and the QEMU.
func accelKey(kernel, qemu string) string {
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(bootID)) + " " + hash(kernel, qemu)
}

// cachedAccel reads the KVM probe's verdict, if it is for this boot,
// kernel and QEMU.
func cachedAccel(path, kernel, qemu string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	k, a, ok := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return a, ok && k == accelKey(kernel, qemu)
}

// CacheUsage is the size of a directory tree and its largest parts.
type CacheUsage struct {
	Bytes int64            `json:"bytes"`
	Parts map[string]int64 `json:"parts"` // by top-level entry
	// Unreadable counts directories that could not be read (their size
	// is missing).
	Unreadable int `json:"unreadable,omitempty"`
}

// DiskUsage sums the sizes (allocated blocks) of the files below dir.
func DiskUsage(dir string) CacheUsage {
	u := CacheUsage{Parts: map[string]int64{}}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			u.Unreadable++
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		n := fi.Size()
		if st, ok := sysBlocks(fi); ok {
			n = st
		}
		u.Bytes += n
		if rel, err := filepath.Rel(dir, path); err == nil && rel != "." {
			top, _, _ := strings.Cut(rel, string(filepath.Separator))
			u.Parts[top] += n
		}
		return nil
	})
	return u
}

// SortedParts returns the parts, largest first.
func (u CacheUsage) SortedParts() []string {
	names := make([]string, 0, len(u.Parts))
	for n := range u.Parts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if u.Parts[names[i]] != u.Parts[names[j]] {
			return u.Parts[names[i]] > u.Parts[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// sysBlocks is the space a file takes on disk.
func sysBlocks(fi fs.FileInfo) (int64, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512, true
	}
	return 0, false
}
