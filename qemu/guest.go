package qemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// Devices attaches a vfio-user-pci function at SocketPath(k) to guest k
	// (the servers must listen before Run).
	Devices bool
	// Stdout receives the command's output, each line prefixed "[gK] ".
	Stdout io.Writer
	// Stderr receives hcaemu's diagnostics (failures with the guest's last
	// lines).
	Stderr io.Writer
	// Segment is the guests' Ethernet segment (guest k's vmxnet3 is port
	// k); in-process ports may be attached before Run.
	Segment *fabric.Segment
	// AllowReboot lets a guest reboot: QEMU restarts the machine (the
	// device sees the reset and the driver probes again) and the command
	// runs again with HCAEMU_BOOT counting boots from 1.
	AllowReboot bool
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
	// Run directories of runs that crashed a day ago or more.
	if old, err := os.ReadDir(filepath.Join(e.CacheDir, dirRun)); err == nil {
		for _, o := range old {
			if fi, err := o.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
				os.RemoveAll(filepath.Join(e.CacheDir, dirRun, o.Name()))
			}
		}
	}
	var rb [6]byte
	rand.Read(rb[:])
	dir := filepath.Join(e.CacheDir, dirRun, hex.EncodeToString(rb[:]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Env: e, Dir: dir, Guests: guests, Stdout: os.Stdout, Stderr: os.Stderr}
	seg, err := fabric.NewSegment(filepath.Join(dir, "switch.net"), c.netSockets())
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ethernet segment: %w", err)
	}
	c.Segment = seg
	return c, nil
}

// netSockets are the guests' ends of the segment (QEMU binds them).
func (c *Cluster) netSockets() []string {
	ports := make([]string, c.Guests)
	for k := range ports {
		ports[k] = filepath.Join(c.Dir, fmt.Sprintf("g%d.net", k))
	}
	return ports
}

// SocketPath is where guest k's vfio-user server must listen.
func (c *Cluster) SocketPath(k int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("hca%d.sock", k))
}

// Close stops the segment and removes the run directory.
func (c *Cluster) Close() error {
	if c.Segment != nil {
		c.Segment.Close()
		c.Segment = nil
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

// Marker lines printed by the guest init.
const (
	markerExit    = "HCAEMU-EXIT "
	markerFail    = "HCAEMU-FAIL "
	markerWait    = "HCAEMU-WAIT"
	markerStarted = "HCAEMU-STARTED"
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
	evIgnore
)

// parseLine classifies one console line (without its line ending). For evExit
// status is the exit status and text the output before the marker (a last
// line without a newline); for evFail text is what failed.
func parseLine(line string) (ev event, status int, text string) {
	t := strings.TrimSpace(line)
	if i := strings.Index(line, markerExit); i >= 0 {
		f := strings.Fields(line[i+len(markerExit):])
		if len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return evExit, n, line[:i]
			}
		}
	}
	switch {
	case strings.HasPrefix(t, markerFail):
		return evFail, 0, strings.TrimPrefix(t, markerFail)
	case t == markerWait:
		return evWait, 0, ""
	case t == markerStarted:
		return evStarted, 0, ""
	case strings.HasPrefix(t, markerGo):
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
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	tail    tailBuffer // console lines (all of them, last N)
	qerr    tailBuffer // QEMU's stderr
	waiting chan struct{}
	started chan struct{}
	exited  chan struct{} // QEMU exited
	boots   int           // HCAEMU-WAIT lines seen: boots of this guest
	status  int
	failed  string
	brief   bool // report the error without the console (the caller stopped us)
	err     error
	mu      sync.Mutex
}

// Run boots the guests, runs script in each (guest 0 first: the others start
// their command once guest 0 has started its own) and returns one result per
// guest.
func (c *Cluster) Run(ctx context.Context, script string) ([]GuestResult, error) {
	e := c.Env
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	ctx, cancelAll := context.WithCancelCause(ctx)
	defer cancelAll(nil)
	initrd := filepath.Join(c.Dir, "initrd.cpio")
	if err := makeInitrd(ctx, e.Builder, e.Initramfs, initrd, script); err != nil {
		return nil, fmt.Errorf("per-run initrd: %w", err)
	}
	if c.Segment == nil {
		return nil, errors.New("cluster is closed")
	}
	seg := c.Segment
	ports := c.netSockets()
	if len(ports) != c.Guests {
		return nil, errors.New("cluster: Guests changed after NewCluster")
	}
	for _, p := range ports {
		os.Remove(p)
	}

	out := lineWriter{mu: &sync.Mutex{}, w: c.Stdout}
	diag := lineWriter{mu: out.mu, w: c.Stderr}
	guests := make([]*guestRun, c.Guests)
	for k := range guests {
		g := guestSpec{
			index: k, memoryMiB: c.MemoryMiB, accel: e.Accel, kernel: e.Kernel, initrd: initrd,
			netSocket: ports[k], switchPath: seg.Path(), wait: k > 0 || c.AllowReboot,
			reboot: c.AllowReboot,
		}
		if c.Devices {
			g.devSocket = c.SocketPath(k)
		}
		argv := append([]string{e.QEMU}, qemuArgs(g)...)
		if e.Root != "" {
			argv = chrootArgv(e.Root, e.CacheDir, argv...)
		}
		gr := &guestRun{k: k, status: -1, waiting: make(chan struct{}), started: make(chan struct{}), exited: make(chan struct{})}
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

	// Guests >= 1 start their command once guest 0 has started its own.
	for _, gr := range guests[1:] {
		go func() {
			select {
			case <-guests[0].started:
			case <-ctx.Done():
				return
			}
			select {
			case <-gr.waiting:
				io.WriteString(gr.stdin, markerGo+"\n")
			case <-ctx.Done():
			}
		}()
	}
	// If guest 0 dies before starting, the others would wait for ever.
	go func() {
		select {
		case <-guests[0].exited:
			select {
			case <-guests[0].started:
			default:
				cancelAll(errors.New("guest 0 stopped before starting its command"))
			}
		case <-ctx.Done():
		}
	}()

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
		if r.Err != nil {
			var b strings.Builder
			fmt.Fprintf(&b, "hcaemu: guest %d: %v", k, r.Err)
			if s := gr.qerr.String(); s != "" && !gr.brief {
				fmt.Fprintf(&b, "\nhcaemu: guest %d: QEMU's messages:\n%s", k, indent(s))
			}
			if s := gr.tail.String(); s != "" && !gr.brief {
				fmt.Fprintf(&b, "\nhcaemu: guest %d: last console lines:\n%s", k, indent(s))
			}
			diag.line("", b.String())
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
		ev, status, text := parseLine(line)
		gr.mu.Lock()
		gr.tail.add(ansiRe.ReplaceAllString(line, ""))
		switch ev {
		case evExit:
			if !exited {
				gr.status = status
				exited = true
				// The guest powers off next; don't wait for a stuck shutdown.
				t := time.AfterFunc(30*time.Second, gr.kill)
				defer t.Stop()
			}
		case evFail:
			gr.failed = text
		case evWait:
			started = false // a reboot: boot noise until the next STARTED
			gr.boots++
			if gr.boots > 1 || gr.k == 0 {
				// A reboot (or guest 0 waiting because reboots are on):
				// no ordering to respect, go at once.
				fmt.Fprintf(gr.stdin, "%s %d\n", markerGo, gr.boots)
			} else {
				closeOnce(gr.waiting)
			}
		case evStarted:
			started = true
			closeOnce(gr.started)
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

// ansiRe matches the terminal control sequences SeaBIOS and the kernel print.
var ansiRe = regexp.MustCompile(`\x1b(\[[0-9;?]*[a-zA-Z]|[a-zA-Z])`)

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
