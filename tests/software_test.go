package tests

import (
	"regexp"
	"testing"
)

// TestE2ERealSoftware runs real RDMA software from Debian's packages
// between two guests over hcaemu, in one boot (testdata/software/run.sh):
// a kernel ULP, an NVMe-oF target (nvmet_rdma, configfs, a file-backed
// namespace) in guest 0 and "nvme connect -t rdma" in guest 1, with 16 MiB
// of random data written through the block device with O_DIRECT, read
// back and compared by SHA-256; then libfabric's fi_pingpong on the verbs
// provider, on an RC endpoint (FI_EP_MSG, rdma_cm) and on a reliable
// datagram endpoint over it (verbs;ofi_rxm); then UCX's ucx_perftest,
// tag-matching latency and RMA put bandwidth over rc_verbs. qperf runs in
// TestE2EImageDebianQperf; what each needs is in docs/software.md.
func TestE2ERealSoftware(t *testing.T) {
	needE2E(t)
	share := shared(t, "software/run.sh", "nvme/nvmeof.sh")
	out, code := hcaemuRun(t, "--guests", "2", "--image", "debian", "--packages", "libfabric-bin,nvme-cli,ucx-utils",
		"--ulp", "nvmet_rdma,nvme_rdma", "--share", share+":/x", "--timeout", "15m", "--", "bash /x/run.sh")
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	mustContain(t, out, 0, `(?m)^STEP nvmet 0$`, `(?m)^STEP nvmet-listen 0$`,
		`nvmet: creating nvm controller 1 for subsystem hcaemu`,
		`(?m)^STEP fi-msg 0$`, `(?m)^STEP fi-rdm 0$`, `(?m)^SOFTWARE-END$`)
	mustContain(t, out, 1, `(?m)^STEP nvme-connect 0$`, `(?m)^STEP nvme-write 0$`, `(?m)^STEP nvme-read 0$`,
		`(?m)^STEP nvme-disconnect 0$`,
		// fi_pingpong's result: size, messages sent, acknowledged, total.
		`(?m)^4k\s+200\s+=200\s+`,
		`(?m)^STEP fi-msg 0$`, `(?m)^STEP fi-rdm 0$`,
		// ucx_perftest's summary: iterations, then latency and bandwidth.
		`(?m)^Final:\s+1000\s+[0-9.]+`, `(?m)^STEP ucx-tag-lat 0$`,
		`(?m)^Final:\s+500\s+[0-9.]+`, `(?m)^STEP ucx-put-bw 0$`, `(?m)^SOFTWARE-END$`)
	m := regexp.MustCompile(`NVME-SUMS ([0-9a-f]{64}) ([0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Errorf("the data read back through nvme-rdma differs from what was written: %v", m)
	}
	if t.Failed() {
		t.Logf("hcaemu run output:\n%s", out)
	}
}
