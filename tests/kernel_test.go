package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/qemu"
)

// buildPatchedDriver builds vmw_pvrdma.ko from the provisioned kernel's
// source with a pr_info line added to its module init, in the provisioned
// trixie root (as provisioning builds the unmodified one), into out.
const buildPatchedDriver = `set -eu
krel=$(ls /lib/modules)
src=$(ls /usr/src/linux-source-*.tar.xz | head -n 1)
b=$(mktemp -d /tmp/patched.XXXXXX)
cd "$b"
top=$(basename "$src" .tar.xz)
tar -xJf "$src" "$top/drivers/infiniband/hw/vmw_pvrdma"
d=$b/$top/drivers/infiniband/hw/vmw_pvrdma
sed -i '/^static int __init pvrdma_init(void)$/,/^{$/ s/^{$/{\n\tpr_info("hcaemu-e2e: patched vmw_pvrdma loaded\\n");/' "$d/pvrdma_main.c"
grep -q 'hcaemu-e2e: patched' "$d/pvrdma_main.c"
make -s -C "/usr/src/linux-headers-$krel" M="$d" CONFIG_INFINIBAND_VMWARE_PVRDMA=m modules
mkdir -p /patched/drivers
cp "$d/vmw_pvrdma.ko" /patched/drivers/
rm -rf "$b"
`

// A driver developer's rebuilt vmw_pvrdma.ko (--modules), on the kernel
// given with --kernel: the guests load it (its pr_info shows in dmesg) and
// the device works with it; --kernel-tree without a tree is refused.
func TestE2EPatchedDriver(t *testing.T) {
	needE2E(t)
	root := filepath.Join(qemu.DefaultCacheDir(), "trixie")
	out := t.TempDir()
	build := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", `set -e
root=$1; out=$2; script=$3
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mkdir -p "$root/patched"
mount --bind "$out" "$root/patched"
exec chroot "$root" /bin/sh -c "$script"`, "build", root, out, buildPatchedDriver)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the patched driver: %v\n%s", err, msg)
	}
	kernel := filepath.Join(qemu.DefaultCacheDir(), "guest", "vmlinuz")
	o, code := hcaemuRun(t, "--guests", "2", "--kernel", kernel, "--modules", out, "--timeout", "10m", "--",
		`dmesg | grep hcaemu-e2e; ibv_rc_pingpong -g 1 -n 20 $HCAEMU_SERVER_IP`)
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	for k := 0; k < 2; k++ {
		mustContain(t, o, k, `hcaemu-e2e: patched vmw_pvrdma loaded`, `20 iters in [0-9.]+ seconds`)
	}
	o, code = hcaemuRun(t, "--kernel-tree", out, "--", "true")
	if code != 2 || !strings.Contains(o, "hcaemu run: --kernel-tree: kernel tree "+out+" has no arch/x86/boot/bzImage") {
		t.Errorf("--kernel-tree of a non-tree: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(out, "drivers", "vmw_pvrdma.ko")); err != nil {
		t.Error(err)
	}
}
