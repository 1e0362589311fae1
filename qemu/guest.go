package qemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"golang.org/x/sys/unix"
)

// Cluster is N guests on one Ethernet segment, each optionally with an
// emulated PVRDMA function (a vfio-user server listening on SocketPath(k)
// before Run).
type Cluster struct {
	Env *Env
	// Dir is the run directory (below the cache, so that its paths mean the
	// same inside the QEMU root): sockets, the per-run initrd.
	Dir string
	// Guests is the number of guests (1..).
	Guests int
	// MemoryMiB is each guest's RAM (0 = DefaultMemoryMiB).
	MemoryMiB int
	// Timeout bounds the whole run (boot + command); 0 = no limit.
	Timeout time.Duration
	// Devices attaches a vfio-user-pci function at SocketPath(k) to guest k,
	// and with ModelPVRDMAMLX5 a second one at MLX5SocketPath(k) (the
	// servers must listen before Run).
	Devices bool
	// Stdout receives the command's output, each line prefixed "[gK] ".
	Stdout io.Writer
	// Stderr receives hcaemu's diagnostics (failures with the guest's last
	// lines).
	Stderr io.Writer
	// Switch is the guests' Ethernet segment: Run attaches guest k's
	// vmxnet3 to it as NIC "gK" with MAC GuestMAC(k), beside the HCAs
	// attached by the caller (nil: Run makes a segment of the NICs alone).
	Switch *fabric.Switch
	// AllowReboot lets a guest reboot: QEMU restarts the machine (the
	// device sees the reset and the driver probes again) and the command
	// runs again with HCAEMU_BOOT counting boots from 1.
	AllowReboot bool
	// Ready says when guest 0's command is ready for the others to start
	// theirs ("" = ReadyListen).
	Ready Readiness
	// CPUs is each guest's number of vCPUs (0 = 1).
	CPUs int
	// Shares are host directories mounted in every guest (virtio-9p).
	Shares []Share
	// Kernel, when set, is the kernel and modules the guests boot instead
	// of the provisioned ones (see Env.PrepareKernel).
	Kernel *GuestKernel
	// Image is a root file system disk image (Env.Image, the default) that
	// every guest attaches read-only; the command then runs in it. "" runs
	// the command in the initramfs.
	Image string
	// Net is guest 0's IPv4 address and the prefix length; guest k's is
	// k above it (the zero value: DefaultGuestNet). Clusters on different
	// hosts joined by an uplink need addresses (and so MACs) that differ.
	Net netip.Prefix
	// SoftRoCE lists the guests that use Linux soft-RoCE (rxe0 over their
	// vmxnet3) instead of an emulated HCA: they get no PVRDMA function
	// even with Devices.
	SoftRoCE []int
	// MTU is the MTU of the guests' vmxnet3s (0: 1500), up to MaxMTU for a
	// segment of jumbo frames. The emulated HCAs must be told the same
	// (pvrdma.Config.MTU): their ports' active MTU follows from it.
	MTU int
	// FaultPorts gives guest k a virtio-serial port FaultsPortName
	// connected to the unix socket FaultsSocketPath(k) (a server must
	// listen there before Run): the guest's hcaemu-faults command.
	FaultPorts bool
	// Model is the device model of the guests' emulated HCAs ("" =
	// ModelPVRDMA), which their init loads the driver of and waits for.
	// ModelMLX5 guests (but the SoftRoCE ones) load mlx5_core, mlx5_ib and
	// ib_ipoib, wait for mlx5_0 and give ib0 the address k above
	// IPoIBNet(Net), in HCAEMU_SERVER_IPOIB (guest 0's; empty in guest 0).
	// ModelPVRDMAMLX5 guests have both HCAs: the PVRDMA function at
	// SocketPath(k) and the ConnectX at MLX5SocketPath(k); they load both
	// drivers and set up ib0 as ModelMLX5 guests do.
	// A Kernel must be prepared for the same model (KernelOptions.Model).
	Model DeviceModel

	runsLock *os.File // shared lock on the work directory's runs.lock
}

// Readiness is when guest 0's command counts as ready: guests >= 1 start
// their command then.
type Readiness string

const (
	// ReadyStarted: as soon as guest 0's command has started.
	ReadyStarted Readiness = "started"
	// ReadyListen: once guest 0 has a listening socket that was not there
	// when its command started (TCP over IPv4 or IPv6, or an rdma_cm
	// listener), or the command declared itself ready as in ReadyMarker.
	ReadyListen Readiness = "listen"
	// ReadyMarker: once the command prints a line "HCAEMU-READY" or runs
	// hcaemu-ready in the guest.
	ReadyMarker Readiness = "marker"
)

// ParseReadiness checks a --ready value.
func ParseReadiness(s string) (Readiness, error) {
	switch r := Readiness(s); r {
	case ReadyStarted, ReadyListen, ReadyMarker:
		return r, nil
	}
	return "", fmt.Errorf("unknown readiness %q (want started, listen or marker)", s)
}

// Share is a host directory mounted read-write in every guest.
type Share struct {
	// HostDir is an absolute path of an existing directory on the host.
	HostDir string
	// GuestDir is the absolute mount point in the guest.
	GuestDir string
}

// DefaultShareDir is where a share without a guest directory is mounted.
const DefaultShareDir = "/mnt/host"

// ParseShare parses HOSTDIR[:GUESTDIR] and checks that HOSTDIR is a
// directory. GUESTDIR defaults to DefaultShareDir.
func ParseShare(s string) (Share, error) {
	host, guest, hasGuest := strings.Cut(s, ":")
	if host == "" {
		return Share{}, fmt.Errorf("share %q: no host directory (want HOSTDIR[:GUESTDIR])", s)
	}
	if !hasGuest {
		guest = DefaultShareDir
	}
	if !strings.HasPrefix(guest, "/") || guest == "/" || strings.ContainsAny(guest, " \t\n:") || len(guest) > 200 {
		return Share{}, fmt.Errorf("share %q: guest directory %q must be an absolute path other than / without spaces or colons", s, guest)
	}
	guest = filepath.Clean(guest)
	abs, err := filepath.Abs(host)
	if err != nil {
		return Share{}, fmt.Errorf("share %q: %v", s, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return Share{}, fmt.Errorf("share %q: host directory: %v", s, err)
	}
	if !fi.IsDir() {
		return Share{}, fmt.Errorf("share %q: %s is not a directory", s, abs)
	}
	return Share{HostDir: abs, GuestDir: guest}, nil
}

// GuestResult is the outcome of one guest.
type GuestResult struct {
	Guest int
	// ExitStatus is the command's exit status from the HCAEMU-EXIT marker,
	// -1 if the guest never printed one.
	ExitStatus int
	// Err says why there is no exit status (boot failure, timeout, QEMU
	// exit), nil otherwise.
	Err error
}

// NewCluster creates a run directory for guests guests.
func (e *Env) NewCluster(guests int) (*Cluster, error) {
	if guests < 1 {
		return nil, fmt.Errorf("need at least one guest")
	}
	runs := filepath.Join(e.workDir(), dirRun)
	// Run directories of runs that crashed a day ago or more.
	if old, err := os.ReadDir(runs); err == nil {
		for _, o := range old {
			if fi, err := o.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
				os.RemoveAll(filepath.Join(runs, o.Name()))
			}
		}
	}
	var rb [6]byte
	rand.Read(rb[:])
	dir := filepath.Join(runs, hex.EncodeToString(rb[:]))
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return nil, err
	}
	// The run's own: no other user sees its sockets or files.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	// Held while the run exists: hcaemu cache clean refuses meanwhile.
	lock, err := lockRuns(e.workDir())
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &Cluster{Env: e, Dir: dir, Guests: guests, Stdout: os.Stdout, Stderr: os.Stderr, Image: e.Image, runsLock: lock}, nil
}

// workDir is where runs write: WorkDir, else CacheDir.
func (e *Env) workDir() string {
	if e.WorkDir != "" {
		return e.WorkDir
	}
	return e.CacheDir
}

// guestNet is Net or its default.
func (c *Cluster) guestNet() netip.Prefix {
	if c.Net.IsValid() {
		return c.Net
	}
	return DefaultGuestNet
}

// GuestIP is guest k's IPv4 address.
func (c *Cluster) GuestIP(k int) netip.Addr { return GuestIP(c.guestNet(), k) }

// GuestMAC is the MAC of guest k's vmxnet3, which its HCA is paired with.
func (c *Cluster) GuestMAC(k int) [6]byte { return GuestMAC(c.GuestIP(k)) }

// StreamNetEnv, set to "stream", joins the two guests of a run by a QEMU
// stream netdev (a unix stream socket between the two QEMUs) instead of the
// segment: no HCA port, capture or fault injection sees their traffic. It
// exists to measure the segment against QEMU's own link (scripts/perf.sh).
const StreamNetEnv = "HCAEMU_NET"

// netSocket is where guest k's NIC on the segment listens for its QEMU.
func (c *Cluster) netSocket(k int) string { return filepath.Join(c.Dir, fmt.Sprintf("g%d.net", k)) }

// attachNICs puts the guests' NICs on the segment (a new one when the
// caller gave none); detach takes them off.
func (c *Cluster) attachNICs() (detach func(), err error) {
	sw := c.Switch
	if sw == nil {
		sw = fabric.NewSwitch()
	}
	var nics []*fabric.StreamNIC
	detach = func() {
		for _, n := range nics {
			n.Close()
		}
	}
	for k := range c.Guests {
		n, err := sw.ListenNIC(fmt.Sprintf("g%d", k), c.GuestMAC(k), c.netSocket(k))
		if err != nil {
			detach()
			return nil, fmt.Errorf("ethernet segment: %w", err)
		}
		nics = append(nics, n)
	}
	return detach, nil
}

// SocketPath is where guest k's vfio-user server must listen.
func (c *Cluster) SocketPath(k int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("hca%d.sock", k))
}

// MLX5SocketPath is where the vfio-user server of guest k's second HCA,
// its ConnectX, must listen in a run of ModelPVRDMAMLX5 (the first, its
// PVRDMA function, at SocketPath(k)).
func (c *Cluster) MLX5SocketPath(k int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("hca%d-mlx5.sock", k))
}

// FaultsSocketPath is where guest k's fault-control port connects.
func (c *Cluster) FaultsSocketPath(k int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("g%d.faults", k))
}

// Close removes the run directory.
func (c *Cluster) Close() error {
	if c.runsLock != nil {
		defer c.runsLock.Close()
	}
	if c.Dir == "" {
		return nil
	}
	return os.RemoveAll(c.Dir)
}

// CommandScript joins a command's words into the shell script the guests run
// (like ssh: words are joined with spaces and the guest shell parses them).
func CommandScript(args []string) string {
	return strings.Join(args, " ") + "\n"
}

// Marker lines printed by the guest init. EXIT, STARTED and READY carry the
// run's nonce (sent to the guest init on the console, never given to the
// command), so a command printing them does not end its run.
const (
	markerExit    = "HCAEMU-EXIT "
	markerFail    = "HCAEMU-FAIL "
	markerWait    = "HCAEMU-WAIT"
	markerStarted = "HCAEMU-STARTED"
	markerReady   = "HCAEMU-READY"
	markerGo      = "HCAEMU-GO"
)

// event is what a console line means.
type event int

const (
	evOutput event = iota
	evExit
	evFail
	evWait
	evStarted
	evReady     // the init saw the command ready (with the nonce)
	evReadyLine // the command printed HCAEMU-READY itself
	evIgnore
)

// parseLine classifies one console line (without its line ending) of a run
// whose nonce is nonce. For evExit status is the exit status and text the
// output before the marker (a last line without a newline); for evFail text
// is what failed. Markers with another nonce are output.
func parseLine(line, nonce string) (ev event, status int, text string) {
	t := strings.TrimSpace(line)
	exit := markerExit + nonce + " "
	if i := strings.Index(line, exit); i >= 0 && nonce != "" {
		f := strings.Fields(line[i+len(exit):])
		if len(f) == 1 {
			if n, err := strconv.Atoi(f[0]); err == nil && n >= 0 && n <= 255 {
				return evExit, n, line[:i]
			}
		}
	}
	switch {
	case strings.HasPrefix(t, markerFail):
		return evFail, 0, strings.TrimPrefix(t, markerFail)
	case t == markerWait:
		return evWait, 0, ""
	case nonce != "" && t == markerStarted+" "+nonce:
		return evStarted, 0, ""
	case nonce != "" && t == markerReady+" "+nonce:
		return evReady, 0, ""
	case t == markerReady:
		return evReadyLine, 0, ""
	case strings.HasPrefix(t, markerGo+" "+nonce) && nonce != "":
		return evIgnore, 0, "" // the guest tty's echo of our go line
	}
	return evOutput, 0, ""
}

// lineWriter writes whole lines with a prefix to a shared writer.
type lineWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lineWriter) line(prefix, s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, prefix+s+"\n")
}

// guestRun is the state of one running guest.
type guestRun struct {
	k       int
	nonce   string    // the run's marker nonce
	ready   Readiness // what this guest's init watches for (guest 0)
	reboot  bool      // reboots allowed: HCAEMU-WAIT may follow STARTED
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	tail    tailBuffer // console lines (all of them, last N)
	qerr    tailBuffer // QEMU's stderr
	waiting chan struct{}
	started chan struct{}
	isReady chan struct{} // the command is ready (see Readiness)
	cmdDone chan struct{} // the exit marker arrived (status is set)
	exited  chan struct{} // QEMU exited
	boots   int           // HCAEMU-WAIT lines seen: boots of this guest
	status  int
	failed  string
	brief   bool // report the error without the console (the caller stopped us)
	err     error
	mu      sync.Mutex
}

// kernelFiles returns the kernel the guests boot and the files the run's
// archive adds: for Cluster.Kernel, its modules and their load order. The
// kernel is copied into the run directory, which QEMU's root sees.
func (c *Cluster) kernelFiles() (string, []string, error) {
	gk := c.Kernel
	if gk == nil {
		return c.Env.Kernel, nil, nil
	}
	kernel := filepath.Join(c.Dir, "bzImage")
	if err := copyFile(gk.Kernel, kernel); err != nil {
		return "", nil, fmt.Errorf("guest kernel: %w", err)
	}
	order := filepath.Join(c.Dir, "modules.order")
	if err := os.WriteFile(order, []byte(strings.Join(gk.Order, "\n")+"\n"), 0o644); err != nil {
		return "", nil, err
	}
	files := []string{order + ":modules/order"}
	if gk.Model.HasMLX5() {
		// The mlx5 modules of this kernel, not the provisioned one's.
		mlx5 := filepath.Join(c.Dir, "modules.order.mlx5")
		if err := os.WriteFile(mlx5, []byte(strings.Join(gk.MLX5Order, "\n")+"\n"), 0o644); err != nil {
			return "", nil, err
		}
		files = append(files, mlx5+":modules/order.mlx5")
	}
	for _, m := range slices.Concat(gk.Order, gk.MLX5Order) {
		if src, ok := gk.Files[m]; ok {
			files = append(files, src+":modules/"+m+".ko")
		}
	}
	return kernel, files, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// exitStatus is the command's exit status (-1: none yet).
func (gr *guestRun) exitStatus() int {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return gr.status
}

// newNonce returns a fresh marker nonce.
func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run boots the guests, runs script in each (guest 0 first: the others start
// their command once guest 0's command is ready, see Cluster.Ready) and
// returns one result per guest. When guest 0's command fails (or its guest
// stops without an exit status), the others are stopped at once.
func (c *Cluster) Run(ctx context.Context, script string) ([]GuestResult, error) {
	e := c.Env
	ready := c.Ready
	if ready == "" {
		ready = ReadyListen
	}
	if _, err := ParseReadiness(string(ready)); err != nil {
		return nil, err
	}
	if c.Guests == 1 {
		ready = ReadyStarted // nobody waits: no watching
	}
	nonce := newNonce()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	ctx, cancelAll := context.WithCancelCause(ctx)
	defer cancelAll(nil)
	if c.Image != "" && c.Kernel != nil && (c.Kernel.Kernel != c.Env.Kernel || len(c.Kernel.Files) > 0) {
		return nil, errors.New("an image runs on the provisioned kernel and modules (in the base initramfs): no other Cluster.Kernel with Cluster.Image")
	}
	model, err := ParseDeviceModel(string(c.Model))
	if err != nil {
		return nil, err
	}
	var ipoib netip.Prefix
	if model.HasMLX5() {
		if ipoib, err = IPoIBNet(c.guestNet()); err != nil {
			return nil, err
		}
	}
	if k := c.Kernel; k != nil && (model.HasMLX5() && !k.Model.HasMLX5() || model == ModelPVRDMAMLX5 && !k.Model.HasPVRDMA()) {
		km, _ := ParseDeviceModel(string(k.Model))
		return nil, fmt.Errorf("the run's kernel (Cluster.Kernel) was prepared for device model %s, not %s (KernelOptions.Model)", km, model)
	}
	kernel, files, err := c.kernelFiles()
	if err != nil {
		return nil, err
	}
	initrd := filepath.Join(c.Dir, "initrd.cpio")
	if err := makeInitrd(ctx, e.Builder, e.Initramfs, initrd, script, files); err != nil {
		return nil, fmt.Errorf("per-run initrd: %w", err)
	}
	stream := os.Getenv(StreamNetEnv) == "stream"
	if stream && c.Guests != 2 {
		return nil, fmt.Errorf("%s=stream joins two guests, not %d", StreamNetEnv, c.Guests)
	}
	if !stream {
		detachNICs, err := c.attachNICs()
		if err != nil {
			return nil, err
		}
		defer detachNICs()
	}

	out := lineWriter{mu: &sync.Mutex{}, w: c.Stdout}
	diag := lineWriter{mu: out.mu, w: c.Stderr}
	guests := make([]*guestRun, c.Guests)
	for k := range guests {
		g := guestSpec{
			index: k, net: c.guestNet(), memoryMiB: c.MemoryMiB, cpus: c.CPUs, accel: e.Accel, kernel: kernel, initrd: initrd,
			netSocket: c.netSocket(k), reboot: c.AllowReboot, image: c.Image,
		}
		g.rxe = slices.Contains(c.SoftRoCE, k)
		g.mtu = c.MTU
		g.model, g.ipoib = model, ipoib
		if stream {
			g.streamPath, g.streamServer = filepath.Join(c.Dir, "stream.net"), k == 0
		}
		if c.Devices && !g.rxe {
			g.devSocket = c.SocketPath(k)
			if model == ModelPVRDMAMLX5 {
				g.mlx5Socket = c.MLX5SocketPath(k)
			}
		}
		if c.FaultPorts {
			g.faults = c.FaultsSocketPath(k)
		}
		var binds []bindMount
		for i, sh := range c.Shares {
			dir := sh.HostDir
			if e.Root != "" {
				// Inside the QEMU root the share is bound below /run.
				dir = shareMount(i)
				binds = append(binds, bindMount{hostDir: sh.HostDir, dir: dir})
			}
			g.shares = append(g.shares, guestShare{hostDir: dir, guestDir: sh.GuestDir})
		}
		argv := append([]string{e.QEMU}, qemuArgs(g)...)
		if e.Root != "" {
			if w := e.workDir(); w != e.CacheDir {
				// The run directory, at the same path inside.
				binds = append([]bindMount{{hostDir: w, dir: w}}, binds...)
			}
			argv = chrootArgv(e.Root, e.CacheDir, binds, argv...)
		}
		gr := &guestRun{k: k, nonce: nonce, ready: ReadyStarted, reboot: c.AllowReboot, status: -1,
			waiting: make(chan struct{}), started: make(chan struct{}), isReady: make(chan struct{}),
			cmdDone: make(chan struct{}), exited: make(chan struct{})}
		if k == 0 {
			gr.ready = ready
		}
		gr.tail.max, gr.qerr.max = 60, 30
		gr.cmd = exec.Command(argv[0], argv[1:]...)
		gr.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL, Setpgid: true}
		gr.cmd.Stderr = &qemuStderr{gr: gr}
		stdout, err := gr.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if gr.stdin, err = gr.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		if err := gr.cmd.Start(); err != nil {
			for _, o := range guests[:k] {
				o.kill()
			}
			return nil, fmt.Errorf("starting QEMU for guest %d: %w", k, err)
		}
		guests[k] = gr
		go gr.read(stdout, out)
	}

	// Guests >= 1 start their command once guest 0's is ready.
	release := make(chan struct{})
	for _, gr := range guests[1:] {
		go func() {
			select {
			case <-release:
			case <-ctx.Done():
				return
			}
			select {
			case <-gr.waiting:
				gr.mu.Lock()
				gr.sendGo()
				gr.mu.Unlock()
			case <-ctx.Done():
			}
		}()
	}
	if len(guests) > 1 {
		go watchGuest0(ctx, guests[0], release, cancelAll)
	}

	var wg sync.WaitGroup
	for _, gr := range guests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-gr.exited:
			case <-ctx.Done():
				select {
				case <-gr.exited:
					// It exited on its own (guest 0 failing cancels
					// the run only after it exited): its own report
					// says why.
					return
				default:
				}
				gr.kill()
				<-gr.exited
				gr.mu.Lock()
				if gr.status < 0 && gr.err == nil {
					cause := context.Cause(ctx)
					if errors.Is(cause, context.DeadlineExceeded) {
						gr.err = fmt.Errorf("no exit marker within %s: killed", c.Timeout)
					} else {
						gr.err = fmt.Errorf("killed: %v", cause)
						// Interrupted, or guest 0 failed (its own report
						// says why): the console of this one is noise.
						gr.brief = true
					}
				}
				gr.mu.Unlock()
			}
		}()
	}
	wg.Wait()

	results := make([]GuestResult, len(guests))
	for k, gr := range guests {
		gr.mu.Lock()
		r := GuestResult{Guest: k, ExitStatus: gr.status, Err: gr.err}
		if r.ExitStatus < 0 && r.Err == nil {
			switch {
			case gr.failed != "":
				r.Err = fmt.Errorf("guest boot failed: %s", gr.failed)
			default:
				r.Err = fmt.Errorf("QEMU exited (%v) before the command finished", gr.cmd.ProcessState)
			}
		}
		switch {
		case r.Err != nil:
			var b strings.Builder
			fmt.Fprintf(&b, "hcaemu: guest %d: %v", k, r.Err)
			if s := gr.qerr.String(); s != "" && !gr.brief {
				fmt.Fprintf(&b, "\nhcaemu: guest %d: QEMU's messages:\n%s", k, indent(s))
			}
			if s := gr.tail.String(); s != "" && !gr.brief {
				fmt.Fprintf(&b, "\nhcaemu: guest %d: last console lines:\n%s", k, indent(s))
			}
			diag.line("", b.String())
		case r.ExitStatus > 0 && !gr.brief:
			// The command failed on its own; what QEMU said (a vfio-user
			// request that timed out, a device it could not realize) may
			// be why, and is otherwise seen nowhere.
			if s := gr.qerr.String(); s != "" {
				diag.line("", fmt.Sprintf("hcaemu: guest %d: QEMU's messages:\n%s", k, indent(s)))
			}
		}
		gr.mu.Unlock()
		results[k] = r
	}
	return results, nil
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// qemuStderr keeps QEMU's messages and stops a guest whose KVM failed: QEMU
// pauses such a guest instead of exiting.
type qemuStderr struct {
	gr *guestRun
}

func (q *qemuStderr) Write(p []byte) (int, error) {
	gr := q.gr
	gr.mu.Lock()
	defer gr.mu.Unlock()
	gr.qerr.Write(p)
	if gr.err == nil && strings.Contains(gr.qerr.String(), "KVM internal error") {
		gr.err = errors.New("KVM failed (KVM internal error): KVM does not work here, use HCAEMU_ACCEL=tcg")
		go func() {
			time.Sleep(200 * time.Millisecond) // let QEMU finish its register dump
			gr.kill()
		}()
	}
	return len(p), nil
}

func (gr *guestRun) kill() {
	if gr.cmd.Process != nil {
		// QEMU runs in its own process group (unshare/sh/chroot exec into it).
		syscall.Kill(-gr.cmd.Process.Pid, syscall.SIGKILL)
		gr.cmd.Process.Kill()
	}
}

// read processes guest k's console until QEMU exits.
func (gr *guestRun) read(r io.Reader, out lineWriter) {
	prefix := fmt.Sprintf("[g%d] ", gr.k)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	started, exited := false, false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		line = strings.ReplaceAll(line, "\r", "")
		ev, status, text := parseLine(line, gr.nonce)
		gr.mu.Lock()
		gr.tail.add(ansiRe.ReplaceAllString(line, ""))
		switch ev {
		case evExit:
			if !exited {
				gr.status = status
				exited = true
				closeOnce(gr.cmdDone)
				// The guest powers off next; don't wait for a stuck shutdown.
				t := time.AfterFunc(30*time.Second, gr.kill)
				defer t.Stop()
			}
		case evFail:
			gr.failed = text
		case evWait:
			if started && !gr.reboot {
				ev = evOutput // the command's own line: no reboot here
				break
			}
			started = false // a reboot: boot noise until the next STARTED
			gr.boots++
			if gr.boots > 1 || gr.k == 0 {
				// Guest 0, or a reboot: no ordering to respect, go at once.
				gr.sendGo()
			} else {
				closeOnce(gr.waiting)
			}
		case evStarted:
			started = true
			closeOnce(gr.started)
			if gr.ready == ReadyStarted {
				closeOnce(gr.isReady)
			}
		case evReady:
			closeOnce(gr.isReady)
		case evReadyLine:
			// The command says it is ready (marker mode, or a listener
			// hcaemu cannot see); it is output all the same.
			if started && !exited && gr.ready != ReadyStarted {
				closeOnce(gr.isReady)
			}
			ev = evOutput
		}
		gr.mu.Unlock()
		if ev == evOutput && started && !exited {
			out.line(prefix, line)
		}
		if ev == evExit && started && text != "" && gr.status == status {
			out.line(prefix, text)
		}
	}
	io.Copy(io.Discard, r)
	gr.cmd.Wait()
	close(gr.exited)
}

// sendGo tells the guest init to start the command (gr.mu held).
func (gr *guestRun) sendGo() {
	fmt.Fprintf(gr.stdin, "%s %s %d %s\n", markerGo, gr.nonce, gr.boots, gr.ready)
}

// watchGuest0 closes release once guest 0's command is ready (or has exited
// 0 without being ready: nothing to wait for), and cancels the run when
// guest 0's command fails or its guest stops without an exit status.
func watchGuest0(ctx context.Context, g0 *guestRun, release chan struct{}, cancel context.CancelCauseFunc) {
	select {
	case <-g0.isReady:
	case <-g0.cmdDone:
	case <-g0.exited:
	case <-ctx.Done():
		return
	}
	select {
	case <-g0.isReady:
	default:
		switch st := g0.exitStatus(); {
		case st > 0:
			cancel(fmt.Errorf("guest 0's command failed (exit status %d) before it was ready", st))
			return
		case st < 0:
			cancel(errors.New("guest 0 stopped before its command was ready"))
			return
		}
	}
	close(release)
	select {
	case <-g0.cmdDone:
	case <-g0.exited:
	case <-ctx.Done():
		return
	}
	switch st := g0.exitStatus(); {
	case st > 0:
		cancel(fmt.Errorf("guest 0's command failed (exit status %d)", st))
	case st < 0:
		cancel(errors.New("guest 0 stopped before its command finished"))
	}
}

// ansiRe matches the terminal control sequences SeaBIOS and the kernel print.
var ansiRe = regexp.MustCompile(`\x1b(\[[0-9;?]*[a-zA-Z]|[a-zA-Z])`)

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
