package qemu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SystemCacheDir is the cache root provisions and other users run from.
const SystemCacheDir = "/var/cache/hcaemu"

// CacheChoice is where a run reads what was provisioned and where it writes.
type CacheChoice struct {
	// Dir holds the provisioned files (QEMU's root, kernel, initramfs).
	Dir string
	// WorkDir receives everything the run writes (run directories with
	// their sockets and per-run archives, logs, the KVM probe's verdict)
	// and whatever is provisioned for this user. It is Dir unless Dir is
	// ReadOnly.
	WorkDir string
	// ReadOnly: Dir is complete but not writable by this user; it is used
	// as it is.
	ReadOnly bool
	// Note says why the choice is not the obvious one ("" when it is).
	Note string
}

// cacheState is what the selection rules look at in a candidate cache.
type cacheState struct {
	exists   bool // the directory exists
	writable bool // this user may write it (or create it, when it does not exist)
	complete bool // every provisioning step is done with the current recipes
}

// chooseCache applies the cache-selection rules to dir (in state st), with
// userDir the user's own cache:
//
//   - writable (or creatable): provision into it and write in it;
//   - complete but read-only: use it as it is, write in userDir;
//   - read-only and incomplete (or out of date), or impossible to create:
//     provision into userDir and use that, saying so.
func chooseCache(dir string, st cacheState, userDir string) CacheChoice {
	switch {
	case st.writable || dir == userDir:
		return CacheChoice{Dir: dir, WorkDir: dir}
	case st.exists && st.complete:
		return CacheChoice{Dir: dir, WorkDir: userDir, ReadOnly: true,
			Note: fmt.Sprintf("hcaemu: cache %s is read-only to you: using it as it is; this run writes in %s", dir, userDir)}
	case st.exists:
		return CacheChoice{Dir: userDir, WorkDir: userDir,
			Note: fmt.Sprintf("hcaemu: cache %s is incomplete or out of date and not writable by you: provisioning what it lacks into %s", dir, userDir)}
	default:
		return CacheChoice{Dir: userDir, WorkDir: userDir,
			Note: fmt.Sprintf("hcaemu: cannot create cache %s: using %s", dir, userDir)}
	}
}

// UserCacheDir is this user's own cache: $XDG_CACHE_HOME/hcaemu
// (~/.cache/hcaemu), or /var/cache/hcaemu for root.
func UserCacheDir() string {
	if os.Geteuid() == 0 {
		return SystemCacheDir
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("hcaemu-cache-%d", os.Geteuid()))
	}
	return filepath.Join(d, "hcaemu")
}

// SelectCache picks the cache of a run: dir ("" means the default: --cache,
// else $HCAEMU_CACHE, else for root /var/cache/hcaemu, else /var/cache/hcaemu
// when it is complete, else the user's own cache), read-write or, when it is
// complete and not writable, read-only (chooseCache).
func SelectCache(dir string) (CacheChoice, error) {
	if dir == "" {
		dir = os.Getenv("HCAEMU_CACHE")
	}
	user, err := filepath.Abs(UserCacheDir())
	if err != nil {
		return CacheChoice{}, err
	}
	if dir == "" {
		if os.Geteuid() == 0 {
			dir = SystemCacheDir
		} else if st := probeCache(SystemCacheDir); st.exists && st.complete {
			dir = SystemCacheDir
		} else {
			dir = user
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return CacheChoice{}, err
	}
	return chooseCache(dir, probeCache(dir), user), nil
}

// probeCache looks at a candidate cache.
func probeCache(dir string) cacheState {
	var st cacheState
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		st.exists = true
		st.writable = unix.Access(dir, unix.W_OK|unix.X_OK) == nil
		st.complete = newStepper(dir).complete()
	case errors.Is(err, fs.ErrNotExist):
		// Creatable when its nearest existing ancestor is writable.
		p := dir
		for {
			parent := filepath.Dir(p)
			if parent == p {
				break
			}
			if _, err := os.Stat(parent); err == nil {
				st.writable = unix.Access(parent, unix.W_OK|unix.X_OK) == nil
				break
			}
			p = parent
		}
	}
	return st
}

// newStepper is the stepper of a cache (progress lines go nowhere: it only
// reads stamps).
func newStepper(dir string) *stepper {
	return &stepper{dir: dir}
}

// complete says whether every step of the base environment is done with
// the current recipes.
func (s *stepper) complete() bool {
	p := &provisioner{cache: s.dir, st: s}
	return p.allDone()
}
