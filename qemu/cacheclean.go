package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// runsLock is the file every run holds a shared lock on while its run
// directory exists (CleanCache waits for none: it refuses).
const runsLock = "runs.lock"

// lockRuns takes a shared lock on workDir's runs lock for a run's life.
func lockRuns(workDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(workDir, runsLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CleanCache removes the cache dir, which must be this user's: files that
// belong to the user's subordinate IDs (the root file systems made in
// mmdebstrap's unshare mode) are removed inside a user namespace that maps
// them, so no root is needed. It refuses while a run or a provisioning uses
// the cache.
func CleanCache(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("cache %s belongs to user %d, not to you: only they or root can clean it", dir, st.Uid)
	}
	for _, l := range []struct{ name, who string }{{"lock", "an hcaemu is provisioning it"}, {runsLock, "an hcaemu run is using it"}} {
		f, err := os.OpenFile(filepath.Join(dir, l.name), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		defer f.Close()
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			return fmt.Errorf("cache %s: %s: try again when it is done", dir, l.who)
		}
	}
	// What the user cannot remove belongs to their subordinate IDs:
	// removeTree removes it where those are mapped (and refuses a tree
	// with a mount below it).
	return removeTree(dir)
}

// subIDRootArgv returns the unshare argv that runs a command in the user
// namespace of mmdebstrap's unshare mode (the user's subordinate IDs from 0
// on, as in the root file systems it made: root there is their root) with
// the user mapped above them, so that root there can read and write both;
// false without subordinate IDs or newuidmap.
func subIDRootArgv() ([]string, bool) {
	us, un, gs, gn, ok := subIDs()
	if !ok {
		return nil, false
	}
	return []string{"unshare", fmt.Sprintf("--map-user=%d", un), fmt.Sprintf("--map-users=%d,0,%d", us, un),
		fmt.Sprintf("--map-group=%d", gn), fmt.Sprintf("--map-groups=%d,0,%d", gs, gn), "--setuid", "0", "--setgid", "0"}, true
}

// subIDs returns the user's first subordinate UID and GID ranges, if they
// have both and newuidmap and newgidmap are installed.
func subIDs() (us, un, gs, gn int64, ok bool) {
	name := strconv.Itoa(os.Geteuid())
	if u, err := userName(); err == nil {
		name = u
	}
	us, un, ok1 := subIDRange("/etc/subuid", name, strconv.Itoa(os.Geteuid()))
	gs, gn, ok2 := subIDRange("/etc/subgid", name, strconv.Itoa(os.Getegid()))
	_, e1 := exec.LookPath("newuidmap")
	_, e2 := exec.LookPath("newgidmap")
	return us, un, gs, gn, ok1 && ok2 && e1 == nil && e2 == nil
}

// subIDArgv returns the unshare argv that runs a command as root of a user
// namespace mapping the user to 0 and their subordinate IDs above, so that
// root there owns every file of the user's caches; false without
// subordinate IDs or newuidmap.
func subIDArgv() ([]string, bool) {
	us, un, gs, gn, ok := subIDs()
	if !ok {
		return nil, false
	}
	return []string{"unshare", "--map-root-user",
		fmt.Sprintf("--map-users=%d,1,%d", us, un), fmt.Sprintf("--map-groups=%d,1,%d", gs, gn)}, true
}
