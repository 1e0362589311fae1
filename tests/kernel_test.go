package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/qemu"
)

// patchDriver builds vmw_pvrdma.ko from the provisioned kernel's source,
// changed by patch (a shell snippet run with $d the driver's source
// directory), in the provisioned trixie root (as provisioning builds the
// unmodified one), into /patched/drivers.
func patchDriver(patch string) string {
	return patchModule("drivers/infiniband/hw/vmw_pvrdma", "vmw_pvrdma", "CONFIG_INFINIBAND_VMWARE_PVRDMA=m", patch)
}

// patchModule builds module.ko from the kernel source directory dir with
// config set, changed by patch, into /patched/drivers (see patchDriver).
func patchModule(dir, module, config, patch string) string {
	return `set -eu
krel=$(ls /lib/modules)
src=$(ls /usr/src/linux-source-*.tar.xz | head -n 1)
b=$(mktemp -d /tmp/patched.XXXXXX)
cd "$b"
top=$(basename "$src" .tar.xz)
tar -xJf "$src" "$top/` + dir + `"
d=$b/$top/` + dir + `
` + patch + `
make -s -j2 -C "/usr/src/linux-headers-$krel" M="$d" ` + config + ` modules
mkdir -p /patched/drivers
cp "$d/` + module + `.ko" /patched/drivers/
rm -rf "$b"
`
}

// buildPatchedDriver adds a pr_info line to the driver's module init.
var buildPatchedDriver = patchDriver(`sed -i '/^static int __init pvrdma_init(void)$/,/^{$/ s/^{$/{\n\tpr_info("hcaemu-e2e: patched vmw_pvrdma loaded\\n");/' "$d/pvrdma_main.c"
grep -q 'hcaemu-e2e: patched' "$d/pvrdma_main.c"`)

// buildDriverPatch builds the driver with patch into a new directory (for
// --modules).
func buildDriverPatch(t *testing.T, script string) string {
	t.Helper()
	root := filepath.Join(qemu.DefaultCacheDir(), "trixie")
	out := t.TempDir()
	build := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", `set -e
root=$1; out=$2; script=$3
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mkdir -p "$root/patched"
mount --bind "$out" "$root/patched"
exec chroot "$root" /bin/sh -c "$script"`, "build", root, out, script)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the patched driver: %v\n%s", err, msg)
	}
	return out
}

// A driver developer's rebuilt vmw_pvrdma.ko (--modules), on the kernel
// given with --kernel: the guests load it (its pr_info shows in dmesg) and
// the device works with it; --kernel-tree without a tree is refused.
func TestE2EPatchedDriver(t *testing.T) {
	needE2E(t)
	out := buildDriverPatch(t, buildPatchedDriver)
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

// A driver developer's bug that the device tolerates silently (a send
// doorbell for a QP still in RESET: the device ignores it, so nothing
// fails) stops a --strict fail run at once, and the message names the
// QP, the doorbell and the state. The bug: pvrdma_create_qp rings the
// QP's send doorbell right after CREATE_QP, and the MAD layer creates the
// GSI QP at probe, so the guest never gets to its command.
func TestE2EStrictDriverBug(t *testing.T) {
	needE2E(t)
	out := buildDriverPatch(t, patchDriver(`sed -i 's/^\tdev->qp_tbl\[qp->qp_handle % dev->dsr->caps.max_qp\] = qp;$/&\n\tpvrdma_write_uar_qp(dev, PVRDMA_UAR_QP_SEND | qp->qp_handle);/' "$d/pvrdma_qp.c"
grep -q 'pvrdma_write_uar_qp(dev, PVRDMA_UAR_QP_SEND | qp->qp_handle);$' "$d/pvrdma_qp.c"
test "$(grep -c 'PVRDMA_UAR_QP_SEND | qp->qp_handle' "$d/pvrdma_qp.c")" = 2`))
	kernel := filepath.Join(qemu.DefaultCacheDir(), "guest", "vmlinuz")
	o, code := hcaemuRun(t, "--kernel", kernel, "--modules", out, "--strict", "fail", "--timeout", "10m", "--", "echo COMMAND-$((40+2))")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := regexp.MustCompile(`hcaemu run: --strict fail: stopped at the driver's first mistake: hca0: doorbell: qp [0-9]+: send doorbell \(PVRDMA_UAR_QP_SEND\) in RESET: post_send needs RTS \(or SQD, ERR\): ignored`)
	if !want.MatchString(o) {
		t.Errorf("no finding naming the doorbell and the state")
	}
	if !strings.Contains(o, `level=WARN msg="driver mistake: doorbell"`) {
		t.Errorf("no driver-mistake log line")
	}
	if strings.Contains(o, "COMMAND-42") {
		t.Errorf("the guest ran its command: the run was not stopped at the mistake")
	}
}

// The same for mlx5 (issue 26 item 5): a driver developer's mlx5_ib,
// rebuilt from the guest kernel's source and loaded with --modules, with
// a pr_info at its init and one PRM mistake in its user QPs only
// (create_user_qp sets log_rq_stride 7: 2048-byte receive WQEs, past
// max_wqe_sz_rq). The guest boots and runs on it (its kernel QPs, ib_mad's
// and IPoIB's, are right: the port is ACTIVE, the command starts); the
// first user QP (an ibv_rc_pingpong's) stops the --strict fail run, and
// the message names the structure and the field.
func TestE2EMLX5StrictDriverBug(t *testing.T) {
	needE2E(t)
	out := buildDriverPatch(t, patchModule("drivers/infiniband/hw/mlx5", "mlx5_ib", "CONFIG_MLX5_INFINIBAND=m",
		`sed -i '/^static int __init mlx5_ib_init(void)$/,/^{$/ s/^{$/{\n\tpr_info("hcaemu-e2e: patched mlx5_ib loaded\\n");/' "$d/main.c"
grep -q 'hcaemu-e2e: patched' "$d/main.c"
sed -i '/^static int create_user_qp(/,/^}/ s/MLX5_SET(qpc, qpc, log_rq_stride, qp->rq.wqe_shift - 4);/MLX5_SET(qpc, qpc, log_rq_stride, 7);/' "$d/qp.c"
test "$(grep -c 'MLX5_SET(qpc, qpc, log_rq_stride, 7);' "$d/qp.c")" = 1`))
	kernel := filepath.Join(qemu.DefaultCacheDir(), "guest", "vmlinuz")
	o, code := hcaemuRun(t, "--device", "mlx5", "--kernel", kernel, "--modules", out, "--strict", "fail", "--timeout", "10m", "--",
		`dmesg | grep hcaemu-e2e; echo "BEFORE: $(ibv_devinfo -d mlx5_0 | grep state:)"; ibv_rc_pingpong -d mlx5_0 -p 18650 127.0.0.1; echo COMMAND-$((40+2))`)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	mustContain(t, o, 0, `hcaemu-e2e: patched mlx5_ib loaded`, `BEFORE: \s+state:\s+PORT_ACTIVE \(4\)`)
	want := regexp.MustCompile(`hcaemu run: --strict fail: stopped at the driver's first mistake: hca0: command: create_qp_in\.qpc\.log_rq_stride=7: RQ WQEs of 2048 bytes > max_wqe_sz_rq=512: CREATE_QP failed: status bad parameter\(0x3\), syndrome 0x4d580073`)
	if !want.MatchString(o) {
		t.Errorf("no finding naming create_qp_in.qpc.log_rq_stride")
	}
	if strings.Contains(o, "COMMAND-42") {
		t.Errorf("the guest ran past the mistake: the run was not stopped at it")
	}
}
