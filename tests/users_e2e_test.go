package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The files useradd and usermod change: the test puts them back as they
// were (and removes those it made).
var accountFiles = []string{
	"/etc/passwd", "/etc/passwd-", "/etc/shadow", "/etc/shadow-", "/etc/group", "/etc/group-",
	"/etc/gshadow", "/etc/gshadow-", "/etc/subuid", "/etc/subuid-", "/etc/subgid", "/etc/subgid-",
}

// testUser is a throwaway unprivileged user with a home under /home and a
// subordinate ID range.
type testUser struct {
	name     string
	home     string
	uid, gid uint32
}

// makeTestUsers creates the users (with subordinate ID ranges) and, at
// cleanup, removes them: the account files are restored, the homes removed.
func makeTestUsers(t *testing.T, names ...string) []testUser {
	t.Helper()
	saved := map[string][]byte{}
	stats := map[string]fs.FileInfo{} // mode and owner (/etc/shadow is root:shadow 0640)
	for _, f := range accountFiles {
		if b, err := os.ReadFile(f); err == nil {
			if fi, err := os.Stat(f); err == nil {
				saved[f], stats[f] = b, fi
			}
		}
	}
	var users []testUser
	t.Cleanup(func() {
		for _, u := range users {
			if err := os.RemoveAll(u.home); err != nil {
				t.Errorf("removing %s: %v", u.home, err)
			}
			os.Remove(filepath.Join("/var/mail", u.name))
		}
		for _, f := range accountFiles {
			b, ok := saved[f]
			if !ok {
				os.Remove(f)
				continue
			}
			fi := stats[f]
			st := fi.Sys().(*syscall.Stat_t)
			tmp := f + ".hcaemu-restore"
			err := os.WriteFile(tmp, b, fi.Mode().Perm())
			if err == nil {
				err = os.Chown(tmp, int(st.Uid), int(st.Gid))
			}
			if err == nil {
				err = os.Chmod(tmp, fi.Mode().Perm())
			}
			if err == nil {
				err = os.Rename(tmp, f)
			}
			if err != nil {
				os.Remove(tmp)
				t.Errorf("restoring %s: %v", f, err)
			}
		}
	})
	for _, name := range names {
		if _, err := user.Lookup(name); err == nil {
			t.Fatalf("user %s exists already (left by an earlier run? userdel -r %s)", name, name)
		}
		home := filepath.Join("/home", name)
		if _, err := os.Stat(home); err == nil {
			t.Fatalf("%s exists already", home)
		}
		if out, err := exec.Command("useradd", "--create-home", "--home-dir", home, "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", name, err, out)
		}
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		users = append(users, testUser{name: name, home: home, uid: uint32(uid), gid: uint32(gid)})
		// useradd gives a range when /etc/subuid exists; otherwise one
		// above every range there.
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if !hasSubID(f, name, u.Uid) {
				start := max(subIDEnd("/etc/subuid"), subIDEnd("/etc/subgid"), 100000)
				flag := "--add-subuids"
				if f == "/etc/subgid" {
					flag = "--add-subgids"
				}
				if out, err := exec.Command("usermod", flag, fmt.Sprintf("%d-%d", start, start+65535), name).CombinedOutput(); err != nil {
					t.Fatalf("usermod %s: %v: %s", name, err, out)
				}
			}
		}
	}
	return users
}

func hasSubID(path, name, uid string) bool {
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) == 3 && (f[0] == name || f[0] == uid) {
			return true
		}
	}
	return false
}

func subIDEnd(path string) int {
	b, _ := os.ReadFile(path)
	end := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) == 3 {
			s, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			end = max(end, s+n)
		}
	}
	return end
}

// command returns a command running as u in its home, with the
// environment a login gives (and the host's Go and proxy settings, which
// provisioning's initramfs step needs).
func (u testUser) command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = u.home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{u.gid}}}
	path := "/usr/local/bin:/usr/bin:/bin"
	if g, err := exec.LookPath("go"); err == nil {
		path = filepath.Dir(g) + ":" + path
	}
	cmd.Env = []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name, "PATH=" + path, "LANG=C.UTF-8"}
	for _, k := range []string{"GOPROXY", "GONOSUMDB", "GOSUMDB", "GOFLAGS", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "HCAEMU_MIRROR", "HCAEMU_ACCEL"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// TestE2EUnprivilegedUsers: hcaemu as the user who types it. A throwaway
// user whose home is under /home provisions their own cache from nothing
// and runs the README's first command; cleans that cache without root; then
// that user and a second one, at once, run from root's complete cache,
// read-only to them: nothing is provisioned, both boot, and each run's
// directory (its sockets, its archive) is the user's own, 0700.
func TestE2EUnprivilegedUsers(t *testing.T) {
	needE2E(t)
	if os.Geteuid() != 0 {
		t.Skip("makes throwaway users: needs root")
	}
	for _, tool := range []string{"useradd", "usermod", "newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install passwd and uidmap (scripts/test does)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Root's cache, which the users will use read-only, is complete.
	var rootCache struct {
		Dir      string
		Complete bool
	}
	out, err := exec.CommandContext(ctx, hcaemuBin, "cache", "--json").Output()
	if err != nil || json.Unmarshal(out, &rootCache) != nil || !rootCache.Complete {
		t.Fatalf("root's cache is not complete (%v): %s", err, out)
	}
	// The users' default is /var/cache/hcaemu; another cache of root's is
	// named to them.
	var sysEnv []string
	if rootCache.Dir != "/var/cache/hcaemu" {
		sysEnv = []string{"HCAEMU_CACHE=" + rootCache.Dir}
	}

	// The binary, where the users can run it.
	bin, err := os.MkdirTemp("", "hcaemu-users")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "hcaemu")
	if b, err := os.ReadFile(hcaemuBin); err != nil || os.WriteFile(exe, b, 0o755) != nil {
		t.Fatalf("copying hcaemu: %v", err)
	}
	users := makeTestUsers(t, "hcaemu-e2e-a", "hcaemu-e2e-b")
	a, b := users[0], users[1]
	own := filepath.Join(a.home, ".cache", "hcaemu")

	run := func(u testUser, env []string, args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		cmd := u.command(ctx, env, exe, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	// 1. From an empty cache of their own: provisioning as that user.
	t0 := time.Now()
	stdout, stderr, err := run(a, []string{"HCAEMU_CACHE=" + own}, "run", "--", "ibv_devinfo")
	if err != nil || !strings.Contains(stdout, "PORT_ACTIVE") {
		t.Fatalf("%s provisioning and running: %v\n%s\n%s", a.name, err, stdout, stderr)
	}
	if !strings.Contains(stderr, "hcaemu: provision: ready in") {
		t.Errorf("%s's run did not provision:\n%s", a.name, stderr)
	}
	t.Logf("%s provisioned %s and booted in %s", a.name, own, time.Since(t0).Round(time.Second))

	// 2. That user removes the cache they made (files of their
	// subordinate IDs included), without root.
	if _, err := os.Stat(filepath.Join(own, "sid", "usr", "bin")); err != nil {
		t.Fatalf("no sid root in %s: %v", own, err)
	}
	if stdout, stderr, err := run(a, []string{"HCAEMU_CACHE=" + own}, "cache", "clean"); err != nil {
		t.Fatalf("%s: hcaemu cache clean: %v\n%s%s", a.name, err, stdout, stderr)
	}
	if _, err := os.Lstat(own); !os.IsNotExist(err) {
		t.Fatalf("after hcaemu cache clean, %s is still there (%v)", own, err)
	}

	// 3. Both users at once from root's cache, read-only to them.
	type result struct {
		stdout, stderr string
		err            error
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, u := range []testUser{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.stdout, r.stderr, r.err = run(u, sysEnv, "run", "--", "ibv_devinfo")
		}()
	}
	// While they run: each run directory is its user's, 0700, and the
	// other user cannot look into it.
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
watch:
	for {
		for i, u := range []testUser{a, b} {
			other := []testUser{b, a}[i]
			dirs, _ := filepath.Glob(filepath.Join(u.home, ".cache", "hcaemu", "run", "*"))
			for _, d := range dirs {
				fi, err := os.Stat(d)
				if err != nil || !fi.IsDir() || seen[d] {
					continue
				}
				seen[d] = true
				st := fi.Sys().(*syscall.Stat_t)
				if fi.Mode().Perm() != 0o700 || st.Uid != u.uid {
					t.Errorf("run directory %s: mode %v owner %d, want 0700 and %s's", d, fi.Mode().Perm(), st.Uid, u.name)
				}
				if out, err := other.command(ctx, nil, "ls", d).CombinedOutput(); err == nil {
					t.Errorf("%s sees %s's run directory %s: %s", other.name, u.name, d, out)
				}
			}
		}
		select {
		case <-done:
			break watch
		case <-tick.C:
		}
	}
	for i, u := range []testUser{a, b} {
		r := results[i]
		if r.err != nil || !strings.Contains(r.stdout, "PORT_ACTIVE") {
			t.Errorf("%s from root's cache: %v\n%s\n%s", u.name, r.err, r.stdout, r.stderr)
			continue
		}
		if strings.Contains(r.stderr, "hcaemu: provision:") {
			t.Errorf("%s provisioned with root's complete cache at hand:\n%s", u.name, r.stderr)
		}
		if !strings.Contains(r.stderr, "cache "+rootCache.Dir+" is read-only to you") {
			t.Errorf("%s was not told of the read-only cache:\n%s", u.name, r.stderr)
		}
	}
	if len(seen) != 2 {
		t.Errorf("saw %d run directories while the two runs ran, want 2: %v", len(seen), seen)
	}
}
