package tests

import (
	"regexp"
	"strings"
	"testing"
)

// mlx5NVMeScript is an NVMe-oF/RDMA target in guest 0 on its IPoIB
// address and the host in guest 1, both on mlx5_0 (testdata/nvme/nvmeof.sh:
// 16 MiB of random data written through the block device with O_DIRECT,
// read back and compared by SHA-256), then the disconnect (which drains the queues'
// QPs: mlx5_ib_drain_rq waits without a timeout for the flush of a
// receive posted in ERR). Guest 0 writes its address to /x/nvme.ready
// once the port is enabled, guest 1 /x/nvme.done when it is done; every
// wait is bounded. Each step prints "STEP <name> <exit status>".
const mlx5NVMeScript = liveRunWaitDone + `set -u
step() { echo "STEP $1 $2"; }
waitfor() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); if [ $i -ge 3000 ]; then echo "TIMEOUT waiting for $1"; return 1; fi; sleep 0.1; done; }
. /x/nvmeof.sh
myip=$(ip -4 -o addr show ib0 | sed 's/.*inet \([0-9.]*\).*/\1/')
if [ "$HCAEMU_GUEST" = 0 ]; then
  nvme_target "$myip"
  echo "$myip" > /x/nvme.tmp && mv /x/nvme.tmp /x/nvme.ready
  waitfor /x/nvme.done
  dmesg | grep -i nvmet
else
  waitfor /x/nvme.ready
  nvme_host "$(cat /x/nvme.ready)"
  : > /x/nvme.done
fi
: > /x/g$HCAEMU_GUEST.done
wait_done
`

// TestE2EMLX5NVMe runs an NVMe-oF/RDMA target and host across two mlx5
// guests (issue 26 item 3): nvme_rdma registers its I/O buffers by fast
// registration (IB_DEVICE_MEM_MGT_EXTENSIONS: MTT mkeys of type
// IB_MR_TYPE_MEM_REG, UMR WQEs on its queues' QPs), the target answers
// with RDMA WRITEs and READs and invalidates the host's keys with
// SEND_WITH_INV. The data read back must match what was written; the
// host's device must have fast-registered at least one mkey per I/O; no
// UMR refused on either; --strict fail.
func TestE2EMLX5NVMe(t *testing.T) {
	needE2E(t)
	share := shared(t, "nvme/nvmeof.sh")
	r := startRun(t, share, false, "--device", "mlx5", "--guests", "2", "--image", "debian", "--packages", "nvme-cli",
		"--ulp", "nvmet_rdma,nvme_rdma", "--strict", "fail", "--metrics", "127.0.0.1:0", "--timeout", "10m", "--", mlx5NVMeScript)
	url := r.metricsURL()
	r.poll("both guests' NVMe-oF steps", func() bool { return r.shared("g0.done") && r.shared("g1.done") })
	metrics := scrape(url)
	r.release()
	if err := r.wait(); err != nil {
		t.Errorf("hcaemu run: %v", err)
	}
	out := r.out.String()
	mustContain(t, out, 0, `(?m)^STEP nvmet 0$`, `nvmet: creating nvm controller 1 for subsystem hcaemu`)
	mustContain(t, out, 1, `(?m)^STEP nvme-connect 0$`, `(?m)^STEP nvme-write 0$`, `(?m)^STEP nvme-read 0$`,
		`(?m)^STEP nvme-disconnect 0$`)
	m := regexp.MustCompile(`NVME-SUMS ([0-9a-f]{64}) ([0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Errorf("the data read back through nvme-rdma differs from what was written: %v", m)
	}
	if t.Failed() {
		t.Logf("UMR metrics:\n%s", strings.Join(regexp.MustCompile(`(?m)^hcaemu_mlx5_(umr|fast_reg)\S+ \S+$`).FindAllString(metrics, -1), "\n"))
	}
	for _, c := range []struct {
		hca, name string
		min       float64
	}{
		{"hca1", "fast_reg_mtt", 32}, // 16 MiB each way in I/Os of at most 1 MiB
		{"hca0", "umr_refused", 0},
		{"hca1", "umr_refused", 0},
	} {
		got := metricValue(metrics, `hcaemu_mlx5_`+c.name+`_total{device="`+c.hca+`"}`)
		if c.min == 0 && got != 0 || got < c.min {
			t.Errorf("%s: hcaemu_mlx5_%s_total = %.0f, want %s %.0f", c.hca, c.name, got, map[bool]string{true: "=", false: "≥"}[c.min == 0], c.min)
		}
	}
}
