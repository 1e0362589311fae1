package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cache-selection rules: a writable cache is used as it is; a complete
// read-only one is used read-only with the writes in the user's cache; a
// read-only incomplete one, or one that cannot be made, leaves the user's
// cache to provision, and says so.
func TestChooseCache(t *testing.T) {
	const sys, user = "/var/cache/hcaemu", "/home/u/.cache/hcaemu"
	for _, tc := range []struct {
		name string
		st   cacheState
		want CacheChoice
		note string
	}{
		{"writable", cacheState{exists: true, writable: true}, CacheChoice{Dir: sys, WorkDir: sys}, ""},
		{"writable complete", cacheState{exists: true, writable: true, complete: true}, CacheChoice{Dir: sys, WorkDir: sys}, ""},
		{"missing, creatable", cacheState{writable: true}, CacheChoice{Dir: sys, WorkDir: sys}, ""},
		{"read-only complete", cacheState{exists: true, complete: true}, CacheChoice{Dir: sys, WorkDir: user, ReadOnly: true},
			"cache /var/cache/hcaemu is read-only to you: using it as it is; this run writes in /home/u/.cache/hcaemu"},
		{"read-only partial", cacheState{exists: true}, CacheChoice{Dir: user, WorkDir: user},
			"cache /var/cache/hcaemu is incomplete or out of date and not writable by you: provisioning what it lacks into /home/u/.cache/hcaemu"},
		{"missing, not creatable", cacheState{}, CacheChoice{Dir: user, WorkDir: user}, "cannot create cache /var/cache/hcaemu: using /home/u/.cache/hcaemu"},
	} {
		got := chooseCache(sys, tc.st, user)
		note := got.Note
		got.Note = ""
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
			t.Errorf("%s: note %q, want %q", tc.name, note, tc.note)
		}
	}
	// The user's own cache is theirs even when it cannot be written (the
	// provisioning then says why).
	if got := chooseCache(user, cacheState{exists: true}, user); got != (CacheChoice{Dir: user, WorkDir: user}) {
		t.Errorf("own cache: %+v", got)
	}
}

// probeCache sees a cache complete only when every step's stamp holds the
// current key.
func TestProbeCacheComplete(t *testing.T) {
	dir := t.TempDir()
	if st := probeCache(dir); !st.exists || st.complete {
		t.Fatalf("empty cache: %+v", st)
	}
	if st := probeCache(filepath.Join(dir, "a", "b")); st.exists || !st.writable {
		t.Errorf("missing cache below a writable directory: %+v", st)
	}
	p := newProvisioner(dir, dir, "", nil)
	writeStamps(t, p)
	if st := probeCache(dir); !st.complete {
		t.Errorf("all stamps: %+v", st)
	}
	// An old recipe in one step: out of date.
	if err := os.WriteFile(p.st.stampPath("sid"), []byte("sid-v0 qemu\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := probeCache(dir); st.complete {
		t.Errorf("stale sid: %+v", st)
	}
}

// writeStamps marks every step of p done with the current keys.
func writeStamps(t *testing.T, p *provisioner) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(p.cache, "stamps"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range stepNames {
		// Each key depends on the stamps before it: recompute after
		// each write.
		t0, s, x, m, i := p.keys()
		key := map[string]string{"tools": t0, "sid": s, "trixie": x, "modules": m, "initramfs": i}[name]
		if err := os.WriteFile(p.st.stampPath(name), []byte(key+"\n2026-11-27T19:00:00Z\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Each missing host prerequisite is one line naming the command that
// fixes it.
func TestCheckHost(t *testing.T) {
	ok := hostFacts{user: "tester", newuidmap: true, subuid: true, subgid: true, aptGet: true, aptKnows: true, needTools: true, needGo: true}
	if err := checkHost(ok); err != nil {
		t.Fatalf("a host with everything: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*hostFacts)
		want string
	}{
		{"uidmap", func(h *hostFacts) { h.newuidmap = false }, "as root, run: apt-get install uidmap"},
		{"subuid and subgid", func(h *hostFacts) { h.subuid, h.subgid = false, false },
			"needs /etc/subuid and /etc/subgid ranges for tester (subordinate IDs own the root file systems): as root, run: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 tester"},
		{"subgid", func(h *hostFacts) { h.subgid = false; h.freeSubID = 165536 },
			"needs an /etc/subgid range for tester (subordinate IDs own the root file systems): as root, run: usermod --add-subuids 165536-231071 --add-subgids 165536-231071 tester"},
		{"apt-get", func(h *hostFacts) { h.aptGet = false }, "apt-get not found"},
		{"apt lists", func(h *hostFacts) { h.aptKnows = false }, "as root, run: apt-get update"},
		{"mirror", func(h *hostFacts) { h.mirrorErr = ErrNoMirror }, "no Debian mirror configured in apt"},
		{"go", func(h *hostFacts) { h.goErr = errors.New("the go command is needed") }, "the go command is needed"},
		{"space", func(h *hostFacts) { h.free, h.freeChecked = 1e9, true }, "only 1.0 GB free"},
	} {
		h := ok
		tc.edit(&h)
		err := checkHost(h)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, tc.want)
		}
	}
	// Root needs no subordinate IDs, and updates apt's lists itself.
	root := hostFacts{root: true, aptGet: true, needTools: true}
	if err := checkHost(root); err != nil {
		t.Errorf("root: %v", err)
	}
	// Done steps need nothing of what they would use.
	done := ok
	done.needTools, done.aptKnows, done.needGo, done.goErr = false, false, false, errors.New("no go")
	if err := checkHost(done); err != nil {
		t.Errorf("tools and initramfs done: %v", err)
	}
}

func TestSubIDRange(t *testing.T) {
	f := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(f, []byte("# comment\nalice:100000:65536\n1001:165536:65536\nbad line\nbob:231072:0\n"), 0o644)
	if s, n, ok := subIDRange(f, "alice", "1000"); !ok || s != 100000 || n != 65536 {
		t.Errorf("alice: %d %d %v", s, n, ok)
	}
	if s, _, ok := subIDRange(f, "carol", "1001"); !ok || s != 165536 {
		t.Errorf("by uid: %d %v", s, ok)
	}
	if _, _, ok := subIDRange(f, "bob", "1002"); ok {
		t.Error("an empty range counts")
	}
	if end := subIDEnd(f); end != 231072 {
		t.Errorf("end %d", end)
	}
}
