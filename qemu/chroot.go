package qemu

import (
	"fmt"
	"os"
	"os/exec"
)

// enterScript runs in a private mount namespace (unshare --mount): it binds
// /dev, /sys, a fresh /proc and /dev/shm into the root file system, binds the
// cache tree at the same path inside, and chroots. The mounts vanish when the
// command exits. Arguments: ROOT [HOSTDIR DIR]... -- COMMAND... A DIR the
// caller may not create in ROOT is made on a tmpfs over its deepest existing
// ancestor (e.g. /home inside a root that belongs to subordinate IDs or to
// root, entered by an unprivileged user).
const enterScript = `set -e
PATH=$PATH:/usr/sbin:/sbin # chroot, for users whose PATH lacks it
root=$1; shift
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --make-rslave "$root/sys"
while [ "$1" != -- ]; do
	if ! mkdir -p "$root$2" 2>/dev/null; then
		# Not ours to create in this root (a root file system of another
		# user, or made in a user namespace, has a /home we cannot
		# write): a tmpfs over the deepest directory it has on the way.
		a=$2
		while [ ! -d "$root$a" ]; do a=$(dirname "$a"); done
		case "$a" in
		/|/usr|/usr/*|/etc|/etc/*|/bin|/sbin|/lib*|/dev|/dev/*|/proc|/proc/*|/sys|/sys/*|/var)
			echo "hcaemu-enter: cannot make $2 in $root (it would hide $a)" >&2; exit 1;;
		esac
		mount -t tmpfs -o mode=0755 tmpfs "$root$a"
		mkdir -p "$root$2"
	fi
	mount --bind "$1" "$root$2"
	shift 2
done
shift
exec chroot "$root" "$@"
`

// bindMount is a host directory bound at dir inside a root.
type bindMount struct {
	hostDir, dir string
}

// chrootArgv returns the argv that runs argv inside root with cacheDir bound
// at the same path and the binds bound. Root is entered through unshare so nothing leaks into
// the host's mount table; without root privileges a user namespace maps the
// caller to root.
func chrootArgv(root, cacheDir string, binds []bindMount, argv ...string) []string {
	// A PID namespace whose init dies with unshare (--kill-child): when
	// hcaemu dies, everything started inside goes too.
	un := []string{"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child"}
	if os.Geteuid() != 0 {
		un = append(un, "--map-root-user")
	}
	out := append(un, "--", "/bin/sh", "-c", enterScript, "hcaemu-enter", root)
	out = append(out, cacheDir, cacheDir)
	for _, b := range binds {
		out = append(out, b.hostDir, b.dir)
	}
	out = append(out, "--")
	return append(out, argv...)
}

// checkPrivileges fails with a one-line hint when neither root nor user
// namespaces are available.
func checkPrivileges() error {
	if os.Geteuid() == 0 {
		return nil
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("hcaemu needs root or the unshare tool (util-linux) with user namespaces: run as root, or install util-linux")
	}
	if err := exec.Command("unshare", "--map-root-user", "--mount", "true").Run(); err != nil {
		return fmt.Errorf("not root and user namespaces are unavailable (%v): run as root, or enable them (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0)", err)
	}
	return nil
}
