package qemu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCacheDir is $HCAEMU_CACHE, else /var/cache/hcaemu for root, else
// $XDG_CACHE_HOME/hcaemu (~/.cache/hcaemu).
func DefaultCacheDir() string {
	if d := os.Getenv("HCAEMU_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/hcaemu"
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "hcaemu-cache")
	}
	return filepath.Join(d, "hcaemu")
}

// stepper runs cached provisioning steps. A step is done when its stamp file
// holds the step's key; its stamp content (key + completion time) feeds the
// keys of later steps, so redoing a step redoes what depends on it.
type stepper struct {
	dir string
	log io.Writer
}

func (s *stepper) stampPath(name string) string {
	return filepath.Join(s.dir, "stamps", name)
}

// stamp returns the content of a step's stamp ("" if not done).
func (s *stepper) stamp(name string) string {
	b, err := os.ReadFile(s.stampPath(name))
	if err != nil {
		return ""
	}
	return string(b)
}

func (s *stepper) done(name, key string) bool {
	st := s.stamp(name)
	k, _, _ := strings.Cut(st, "\n")
	return st != "" && k == key
}

// run runs fn unless the step is done. Before fn the stamp is removed, so a
// step interrupted half-way is redone (fn must clean its own outputs).
func (s *stepper) run(name, key, what string, fn func() error) error {
	if s.done(name, key) {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "stamps"), 0o755); err != nil {
		return err
	}
	os.Remove(s.stampPath(name))
	fmt.Fprintf(s.log, "hcaemu: provision: %s...\n", what)
	t0 := time.Now()
	if err := fn(); err != nil {
		return fmt.Errorf("provision %s: %w", name, err)
	}
	fmt.Fprintf(s.log, "hcaemu: provision: %s: done in %s\n", what, time.Since(t0).Round(100*time.Millisecond))
	content := key + "\n" + time.Now().UTC().Format(time.RFC3339Nano) + "\n"
	return writeFileAtomic(s.stampPath(name), []byte(content), 0o644)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeTree removes dir after checking that nothing is mounted below it (a
// leftover bind mount of /dev or /sys would otherwise be emptied).
func removeTree(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); os.IsNotExist(err) {
		return nil
	}
	if mp, ok := mountBelow(abs); ok {
		return fmt.Errorf("refusing to remove %s: %s is mounted below it (umount it first)", abs, mp)
	}
	err = os.RemoveAll(abs)
	if err != nil && os.Geteuid() != 0 {
		// A root file system of the user's subordinate IDs (made in
		// mmdebstrap's unshare mode): removed where they are mapped.
		if argv, ok := subIDArgv(); ok {
			if out, err2 := exec.Command(argv[0], append(argv[1:], "rm", "-rf", "--one-file-system", "--", abs)...).CombinedOutput(); err2 != nil {
				return fmt.Errorf("removing %s in a user namespace: %v: %s", abs, err2, out)
			}
			return nil
		}
	}
	return err
}

// mountBelow returns a mount point at or below the absolute path abs.
func mountBelow(abs string) (string, bool) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 {
			mp := unescapeMount(f[4])
			if mp == abs || strings.HasPrefix(mp, strings.TrimSuffix(abs, "/")+"/") {
				return mp, true
			}
		}
	}
	return "", false
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// freeBytes returns the free space of the file system holding path (or its
// nearest existing ancestor).
func freeBytes(path string) (uint64, error) {
	p := path
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return 0, err
		}
		p = parent
	}
}

// cmdRunner runs external commands for provisioning, keeping their output in
// a log file and returning its tail in errors.
type cmdRunner struct {
	logDir string
}

func (r *cmdRunner) run(ctx context.Context, step string, dir string, env []string, name string, args ...string) error {
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(r.logDir, step+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "+ %s %s\n", name, strings.Join(args, " "))
	var tail tailBuffer
	tail.max = 25
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdin = nil
	w := io.MultiWriter(lf, &tail)
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s failed: %w (full log: %s)\n%s", filepath.Base(name), err, logPath, tail.String())
	}
	return nil
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	max     int
	lines   []string
	partial string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	s := t.partial + string(p)
	parts := strings.Split(s, "\n")
	t.partial = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.add(l)
	}
	return len(p), nil
}

func (t *tailBuffer) add(l string) {
	t.lines = append(t.lines, strings.TrimRight(l, "\r"))
	if t.max > 0 && len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tailBuffer) String() string {
	ls := t.lines
	if t.partial != "" {
		ls = append(append([]string(nil), ls...), t.partial)
	}
	return strings.Join(ls, "\n")
}
