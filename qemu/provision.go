package qemu

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

//go:embed buildmod.sh
var buildModScript string

// Options configure Provision.
type Options struct {
	// CacheDir holds everything provisioned; "" means DefaultCacheDir().
	CacheDir string
	// Log receives progress lines ("hcaemu: provision: ..."); nil means os.Stderr.
	Log io.Writer
	// Mirror is the Debian mirror URI; "" means Mirror() (apt's configuration).
	Mirror string
	// Image is "" (the u-root initramfs only) or ImageDebian: also make (or
	// find) the Debian image with Packages (see ParsePackages) and set
	// Env.Image.
	Image string
	// Packages are the image's extra Debian packages.
	Packages []string
}

// Env is a provisioned environment: a QEMU with vfio-user-pci, a guest kernel
// and a guest initramfs. All paths are absolute and mean the same inside Root
// (the cache tree is bound at the same path there).
type Env struct {
	// CacheDir holds what was provisioned (read-only to this user when it
	// is not WorkDir).
	CacheDir string
	// WorkDir receives what runs write: run directories (sockets, per-run
	// archives) and the KVM probe's verdict ("" = CacheDir).
	WorkDir string
	// Root is the root file system QEMU runs in (entered with unshare +
	// chroot); "" when the host's QEMU is recent enough.
	Root string
	// QEMU is the qemu-system-x86_64 path (inside Root when Root != "").
	QEMU string
	// Kernel and Initramfs are the guest kernel and the base initramfs.
	Kernel, Initramfs string
	// KernelRelease is the guest kernel's release (uname -r).
	KernelRelease string
	// Modules is the guest's module load order (the /modules/order file).
	Modules []string
	// Accel is the QEMU accelerator guests use: "tcg" or "kvm".
	Accel string
	// Builder is the provisioned hcaemu-initramfs, which writes each run's
	// initrd (the base initramfs plus the command).
	Builder string
	// Image is the Debian image's disk image (Options.Image), "" for none.
	// Clusters of this Env attach it (Cluster.Image).
	Image string
}

// Names of the cache tree below CacheDir.
const (
	dirTools  = "tools"  // mmdebstrap, unpacked from its .deb
	dirSid    = "sid"    // Debian sid root file system: QEMU, rdma-core, perftest
	dirTrixie = "trixie" // Debian trixie root file system: kernel, headers, compiler
	dirGuest  = "guest"  // vmlinuz, modules/, initramfs.cpio, hcaemu-initramfs
	dirGoMod  = "gomod"  // Go module that builds the u-root busybox and hcaemu-initramfs
	dirLogs   = "logs"   // step logs; images: see image.go
	dirRun    = "run"    // per-run directories (sockets, per-run initrd)
)

// recipe versions: bump one to redo that step (and those after it) on every
// machine.
const (
	recipeTools     = "tools-v1"
	recipeSid       = "sid-v1"
	recipeTrixie    = "trixie-v1"
	recipeModules   = "modules-v1"
	recipeInitramfs = "initramfs-v1"
)

var sidPackages = []string{
	"qemu-system-x86", "ibverbs-utils", "rdmacm-utils", "perftest", "ibverbs-providers",
	"iproute2", "kmod", "cpio", "xz-utils", "libgcc-s1",
}

var trixiePackages = []string{
	"gcc-14", "make", "binutils", "pahole", "kmod", "xz-utils",
	"linux-image-amd64", "linux-headers-amd64", "linux-source",
}

// guestModules are loaded in the guest (with their dependencies), in this
// preferred order: vmxnet3 is bound before vmw_pvrdma probes (the driver pairs
// with function 0 of its slot), crc32_generic before rdma_rxe.
var guestModules = []string{
	"ib_core", "ib_uverbs", "vmxnet3",
	"ib_cm", "iw_cm", "configfs", "rdma_cm", "rdma_ucm", "ib_umad",
	"crc32_generic", "udp_tunnel", "ip6_udp_tunnel", "rdma_rxe",
	"vmw_pvrdma",
	"9pnet_virtio", "9p", // --share
	"virtio_console", // hcaemu-faults (built into Debian's kernel)
}

// ULPModules are the kernel's RDMA upper-layer protocols a run can ask for
// (hcaemu run --ulp): provisioned with their dependencies, in the initramfs,
// loaded (after vmw_pvrdma) only by the runs that ask.
var ULPModules = []string{"nvme_rdma", "nvmet_rdma", "ib_ipoib", "ib_iser", "ib_srp", "rpcrdma"}

// mlx5Modules are what a guest of the mlx5 device model (ModelMLX5: an
// emulated ConnectX-4 with an InfiniBand port) loads after guestModules, with
// their dependencies (mlxfw, pci-hyperv-intf): the core driver, the RDMA
// driver and IPoIB (ib0). Only mlx5 guests load them (/modules/order.mlx5);
// every guest carries them in the base initramfs (6.3 MB of 44.6: no boot
// time measurable against the spread of TCG boots, issue 25).
var mlx5Modules = []string{"mlx5_core", "mlx5_ib", "ib_ipoib"}

// collectedModules are the modules provisioning collects (with their
// dependencies): the guest's, an image's, the ULPs and the mlx5 model's.
func collectedModules() []string {
	return slices.Concat(guestModules, imageModules, ULPModules, mlx5Modules)
}

const minFreeBytes = 3 << 30

// Provision makes (or finds in the cache) everything needed to boot guests.
// It is idempotent: every step leaves a stamp and is skipped when done.
func Provision(ctx context.Context, opts Options) (*Env, error) {
	logw := opts.Log
	if logw == nil {
		logw = os.Stderr
	}
	switch opts.Image {
	case "", ImageDebian:
	default:
		return nil, fmt.Errorf("unknown image %q (want %s)", opts.Image, ImageDebian)
	}
	choice, err := SelectCache(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	if choice.Note != "" {
		fmt.Fprintln(logw, choice.Note)
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	if len(choice.WorkDir)+len("/run/0123456789abcdef/g0.net") > 100 {
		return nil, fmt.Errorf("cache directory path %q is too long for unix socket paths below it: set HCAEMU_CACHE to a shorter path", choice.WorkDir)
	}
	if err := os.MkdirAll(choice.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create cache directory (set HCAEMU_CACHE or --cache): %w", err)
	}
	if choice.ReadOnly {
		return provisionOver(ctx, opts, choice, logw)
	}
	cache := choice.Dir
	unlock, err := lockCache(cache, true, logw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p := newProvisioner(cache, cache, opts.Mirror, logw)
	imageKeyDone := opts.Image == "" || p.st.done("image-"+hash(imageKey(opts.Packages)), imageKey(opts.Packages))
	if !p.allDone() || !imageKeyDone {
		if err := p.preflight(ctx, cache); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	for _, step := range []func(context.Context) error{p.tools, p.sid, p.trixie, p.modules, p.initramfs} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	var image string
	if opts.Image != "" {
		if image, err = p.image(ctx, opts.Packages); err != nil {
			return nil, err
		}
	}
	if p.didWork {
		fmt.Fprintf(logw, "hcaemu: provision: ready in %s (cache %s)\n", time.Since(t0).Round(time.Second), cache)
	}
	e, err := p.env(ctx)
	if err != nil {
		return nil, err
	}
	e.Image = image
	return e, nil
}

// provisionOver uses a complete cache that is read-only to this user
// (choice.Dir) as it is; what it lacks (an image) is provisioned into the
// user's own cache (choice.WorkDir), where the runs write too.
func provisionOver(ctx context.Context, opts Options, choice CacheChoice, logw io.Writer) (*Env, error) {
	// A shared lock: wait for the owner's provisioning, block nobody else.
	unlock, err := lockCache(choice.Dir, false, logw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	base := newProvisioner(choice.Dir, choice.WorkDir, opts.Mirror, logw)
	if !base.allDone() {
		return nil, fmt.Errorf("cache %s changed while being selected: run again", choice.Dir)
	}
	var image string
	if opts.Image != "" {
		key := imageKey(opts.Packages)
		if base.st.done("image-"+hash(key), key) {
			if image, err = base.image(ctx, opts.Packages); err != nil {
				return nil, err
			}
		} else {
			// Into the user's cache, with the tools of the base.
			unlockOwn, err := lockCache(choice.WorkDir, true, logw)
			if err != nil {
				return nil, err
			}
			defer unlockOwn()
			own := newProvisioner(choice.WorkDir, choice.WorkDir, opts.Mirror, logw)
			own.toolsDir = base.path(dirTools)
			if !own.st.done("image-"+hash(key), key) {
				fmt.Fprintf(logw, "hcaemu: provision: %s has no image with these packages: making it in %s\n", choice.Dir, choice.WorkDir)
				if err := own.preflight(ctx, choice.WorkDir); err != nil {
					return nil, err
				}
			}
			if image, err = own.image(ctx, opts.Packages); err != nil {
				return nil, err
			}
		}
	}
	e, err := base.env(ctx)
	if err != nil {
		return nil, err
	}
	e.Image = image
	return e, nil
}

// lockCache takes the provisioning lock of a cache: exclusive to provision
// (a second hcaemu waits), shared to use a cache read-only.
func lockCache(cache string, exclusive bool, logw io.Writer) (unlock func(), err error) {
	path := filepath.Join(cache, "lock")
	lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		if lock, err = os.Open(path); err != nil {
			if !exclusive {
				return func() {}, nil // a read-only cache without a lock file: nobody provisions it
			}
			return nil, err
		}
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(lock.Fd()), how|unix.LOCK_NB); err != nil {
		fmt.Fprintf(logw, "hcaemu: provision: waiting for another hcaemu provisioning %s...\n", cache)
		if err := unix.Flock(int(lock.Fd()), how); err != nil {
			lock.Close()
			return nil, err
		}
	}
	return func() { lock.Close() }, nil
}

func newProvisioner(cache, workDir, mirror string, logw io.Writer) *provisioner {
	return &provisioner{cache: cache, workDir: workDir, st: &stepper{dir: cache, log: logw},
		r: &cmdRunner{logDir: filepath.Join(cache, dirLogs)}, mirror: mirror, log: logw}
}

type provisioner struct {
	cache    string
	workDir  string // where runs write (the cache unless it is read-only)
	toolsDir string // the tools directory ("" = the cache's)
	st       *stepper
	r        *cmdRunner
	mirror   string
	log      io.Writer
	didWork  bool
}

func (p *provisioner) path(elem ...string) string {
	return filepath.Join(append([]string{p.cache}, elem...)...)
}

func (p *provisioner) keys() (tools, sid, trixie, modules, initramfs string) {
	tools = recipeTools
	sid = recipeSid + " " + strings.Join(sidPackages, ",")
	trixie = recipeTrixie + " " + strings.Join(trixiePackages, ",")
	modules = recipeModules + " " + strings.Join(collectedModules(), ",") + " " + hash(buildModScript) + "|" +
		strings.ReplaceAll(p.st.stamp("trixie"), "\n", " ")
	initramfs = recipeInitramfs + " " + strings.Join(guestCommands, ",") + " " + hash(initScript, readyScript, string(guestGoMod), string(guestGoSum), string(builderSource), string(faultsSource)) + "|" +
		strings.ReplaceAll(p.st.stamp("sid")+p.st.stamp("modules"), "\n", " ")
	return
}

func (p *provisioner) allDone() bool {
	t, s, x, m, i := p.keys()
	return p.st.done("tools", t) && p.st.done("sid", s) && p.st.done("trixie", x) &&
		p.st.done("modules", m) && p.st.done("initramfs", i)
}

func (p *provisioner) getMirror(ctx context.Context) (string, error) {
	if p.mirror == "" {
		m, err := Mirror(ctx)
		if err != nil {
			return "", err
		}
		p.mirror = m
		fmt.Fprintf(p.log, "hcaemu: provision: Debian mirror %s (from apt's configuration)\n", m)
	}
	return p.mirror, nil
}

func (p *provisioner) mmdebstrapPath() string {
	if p.toolsDir != "" {
		return filepath.Join(p.toolsDir, "mmdebstrap", "usr", "bin", "mmdebstrap")
	}
	return p.path(dirTools, "mmdebstrap", "usr", "bin", "mmdebstrap")
}

// tools obtains mmdebstrap from the host's apt archive without installing it.
func (p *provisioner) tools(ctx context.Context) error {
	key, _, _, _, _ := p.keys()
	return p.st.run("tools", key, "fetching mmdebstrap (apt-get download)", func() error {
		p.didWork = true
		dir := p.path(dirTools)
		if err := removeTree(dir); err != nil {
			return err
		}
		dl := filepath.Join(dir, "deb")
		if err := os.MkdirAll(dl, 0o755); err != nil {
			return err
		}
		download := func() error {
			return p.r.run(ctx, "tools", dl, nil, "apt-get", "-q", "-o", "APT::Sandbox::User=root",
				"-o", `Acquire::Check-Valid-Until=false`, "download", "mmdebstrap")
		}
		if err := download(); err != nil {
			if os.Geteuid() != 0 {
				return fmt.Errorf("%w\n(apt's package lists may be missing: run 'apt-get update' as root once)", err)
			}
			fmt.Fprintf(p.log, "hcaemu: provision: apt-get download failed; running apt-get update and retrying\n")
			if err := p.r.run(ctx, "tools", dl, nil, "apt-get", "-q", "-o", `Acquire::Check-Valid-Until=false`, "update"); err != nil {
				return err
			}
			if err := download(); err != nil {
				return err
			}
		}
		debs, _ := filepath.Glob(filepath.Join(dl, "mmdebstrap_*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download mmdebstrap produced %d .deb files", len(debs))
		}
		if err := p.r.run(ctx, "tools", "", nil, "dpkg-deb", "-x", debs[0], filepath.Join(dir, "mmdebstrap")); err != nil {
			return err
		}
		_, err := os.Stat(p.mmdebstrapPath())
		return err
	})
}

// mmdebstrap builds a root file system into dir (via dir.tmp, renamed at the end).
func (p *provisioner) mmdebstrap(ctx context.Context, step, suite, dir string, pkgs []string) error {
	mirror, err := p.getMirror(ctx)
	if err != nil {
		return err
	}
	tmp := dir + ".tmp"
	for _, d := range []string{tmp, dir} {
		if err := removeTree(d); err != nil {
			return err
		}
	}
	mode := "--mode=root"
	if os.Geteuid() != 0 {
		mode = "--mode=unshare"
	}
	args := []string{mode, "--variant=apt", "--include=" + strings.Join(pkgs, ",")}
	for _, o := range aptOptions {
		args = append(args, "--aptopt="+o)
	}
	args = append(args, suite, tmp, "deb "+mirror+" "+suite+" main")
	argv := append([]string{p.mmdebstrapPath()}, args...)
	if os.Geteuid() == 0 {
		// In its own mount namespace, the mounts mmdebstrap makes in the
		// target vanish even if it is killed half-way; in its own PID
		// namespace, its workers (apt, dpkg) die with it.
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--"}, argv...)
	}
	if err := p.r.run(ctx, step, "", nil, argv[0], argv[1:]...); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func (p *provisioner) sid(ctx context.Context) error {
	_, key, _, _, _ := p.keys()
	return p.st.run("sid", key, "Debian sid root file system (QEMU, rdma-core, perftest) with mmdebstrap", func() error {
		p.didWork = true
		return p.mmdebstrap(ctx, "sid", "sid", p.path(dirSid), sidPackages)
	})
}

func (p *provisioner) trixie(ctx context.Context) error {
	_, _, key, _, _ := p.keys()
	return p.st.run("trixie", key, "Debian trixie root file system (kernel, headers, source, gcc) with mmdebstrap", func() error {
		p.didWork = true
		return p.mmdebstrap(ctx, "trixie", "trixie", p.path(dirTrixie), trixiePackages)
	})
}

// modules builds vmw_pvrdma.ko and collects the kernel and modules.
func (p *provisioner) modules(ctx context.Context) error {
	_, _, _, key, _ := p.keys()
	return p.st.run("modules", key, "building vmw_pvrdma.ko and collecting the guest kernel and modules", func() error {
		p.didWork = true
		out := p.path(dirGuest)
		if err := removeTree(out); err != nil {
			return err
		}
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		root := p.path(dirTrixie)
		argv := chrootArgv(root, p.cache, nil, append([]string{"/bin/sh", "-c", buildModScript, "buildmod", out}, collectedModules()...)...)
		if err := p.r.run(ctx, "modules", "", nil, argv[0], argv[1:]...); err != nil {
			return err
		}
		deps, err := os.ReadFile(filepath.Join(out, "modules.deps"))
		if err != nil {
			return err
		}
		order, err := moduleOrder(string(deps), guestModules)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "modules", "order"), []byte(strings.Join(order, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		// What an attached image adds (loaded after order).
		extra, err := extraOrder(string(deps), order, imageModules)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "modules", "order.image"), []byte(strings.Join(extra, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		// What an mlx5 guest adds (loaded after order).
		mlx5, err := extraOrder(string(deps), order, mlx5Modules)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, "modules", "order.mlx5"), []byte(strings.Join(mlx5, "\n")+"\n"), 0o644)
	})
}

// extraOrder is the load order of more modules (with their dependencies)
// after the guest's order: what they add to it.
func extraOrder(deps string, order, more []string) ([]string, error) {
	all, err := moduleOrder(deps, append(slices.Clone(guestModules), more...))
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(m string) bool { return slices.Contains(order, m) }), nil
}

// moduleOrder parses "NAME module DEP..." / "NAME builtin" lines and returns
// a load order: the preferred order, each module preceded by its
// dependencies; built-in modules are left out.
func moduleOrder(deps string, preferred []string) ([]string, error) {
	type mod struct {
		builtin bool
		deps    []string
	}
	mods := map[string]mod{}
	for _, line := range strings.Split(deps, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[1] {
		case "builtin":
			mods[f[0]] = mod{builtin: true}
		case "module":
			mods[f[0]] = mod{deps: f[2:]}
		default:
			return nil, fmt.Errorf("bad modules.deps line %q", line)
		}
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string) error
	visit = func(m string) error {
		switch state[m] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", m)
		case 2:
			return nil
		}
		md, ok := mods[m]
		if !ok {
			return fmt.Errorf("module %s not found in the guest kernel", m)
		}
		state[m] = 1
		for _, d := range md.deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[m] = 2
		if !md.builtin {
			order = append(order, m)
		}
		return nil
	}
	for _, m := range preferred {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func (p *provisioner) initramfs(ctx context.Context) error {
	_, _, _, _, key := p.keys()
	return p.st.run("initramfs", key, "building the guest initramfs (u-root + rdma-core + modules)", func() error {
		p.didWork = true
		return buildInitramfs(ctx, p)
	})
}

func (p *provisioner) env(ctx context.Context) (*Env, error) {
	e := &Env{
		CacheDir:  p.cache,
		WorkDir:   p.workDir,
		Root:      p.path(dirSid),
		QEMU:      "/usr/bin/qemu-system-x86_64",
		Kernel:    p.path(dirGuest, "vmlinuz"),
		Initramfs: p.path(dirGuest, "initramfs.cpio"),
		Builder:   builderPath(p.cache),
	}
	if rel, err := os.ReadFile(p.path(dirGuest, "kernel.release")); err == nil {
		e.KernelRelease = strings.TrimSpace(string(rel))
	}
	if order, err := os.ReadFile(p.path(dirGuest, "modules", "order")); err == nil {
		e.Modules = strings.Fields(string(order))
	}
	if q, ok := hostQEMU(ctx); ok {
		e.Root, e.QEMU = "", q
	}
	e.Accel = p.detectAccel(ctx, e)
	return e, nil
}

var qemuVersionRe = regexp.MustCompile(`version (\d+)\.(\d+)`)

// hostQEMU returns the host's qemu-system-x86_64 if it is >= 10.1 and has
// vfio-user-pci.
func hostQEMU(ctx context.Context) (string, bool) {
	q, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", false
	}
	out, err := exec.CommandContext(ctx, q, "--version").Output()
	if err != nil {
		return "", false
	}
	m := qemuVersionRe.FindStringSubmatch(string(out))
	if m == nil {
		return "", false
	}
	maj, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	if maj < 10 || (maj == 10 && min < 1) {
		return "", false
	}
	out, err = exec.CommandContext(ctx, q, "-device", "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"vfio-user-pci"`) {
		return "", false
	}
	return q, true
}

// detectAccel returns $HCAEMU_ACCEL if set (tcg or kvm). Otherwise it
// returns "kvm" only if KVM really boots the guest: /dev/kvm often exists
// under nested virtualization and still stops the guest kernel with "KVM
// internal error", so a probe guest (one short boot) decides. The answer is
// cached per host boot.
func (p *provisioner) detectAccel(ctx context.Context, e *Env) string {
	if a := os.Getenv("HCAEMU_ACCEL"); a != "" {
		return a
	}
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg" // no KVM, or not ours to use
	}
	kvm.Close()
	key := accelKey(e.Kernel, e.QEMU)
	cache := filepath.Join(p.workDir, "accel")
	if a, ok := cachedAccel(cache, e.Kernel, e.QEMU); ok {
		return a
	}
	fmt.Fprintf(p.log, "hcaemu: provision: /dev/kvm is usable; checking that KVM boots the guest...\n")
	accel := "tcg"
	probe := *e
	probe.Accel = "kvm"
	if cl, err := probe.NewCluster(1); err == nil {
		cl.Stdout, cl.Stderr, cl.Timeout, cl.MemoryMiB = io.Discard, io.Discard, 45*time.Second, 256
		if res, err := cl.Run(ctx, "true\n"); err == nil && res[0].ExitStatus == 0 {
			accel = "kvm"
		}
		cl.Close()
	}
	if ctx.Err() != nil {
		return "tcg"
	}
	fmt.Fprintf(p.log, "hcaemu: provision: using %s (set HCAEMU_ACCEL to override)\n", accel)
	os.WriteFile(cache, []byte(key+"\n"+accel+"\n"), 0o644)
	return accel
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
