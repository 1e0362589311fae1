package tests

import (
	"regexp"
	"strings"
	"testing"
)

// --image debian --packages qperf: both guests run their command in the
// Debian image (bash, Debian's PATH, the packages installed), qperf's server
// in guest 0 (guest 1 starts once it listens) and its RC bandwidth and
// latency tests from guest 1 over the emulated HCAs; "quit" ends the
// server. The image's writes stay in the guest (the cached image is
// read-only), and hcaemu-ready is there too. The command has the HCAEMU_
// variables a command without an image has.
func TestE2EImageDebianQperf(t *testing.T) {
	needE2E(t)
	script := `echo "IMAGE $(. /etc/os-release; echo $ID $VERSION_ID) SHELL=$BASH_VERSION PATH=$PATH HOME=$HOME PWD=$PWD"
test -x /usr/local/bin/hcaemu-ready && echo "HAS-READY"
echo "ENV GUEST=$HCAEMU_GUEST SERVER=$HCAEMU_SERVER_IP RDMA_DEV=$HCAEMU_RDMA_DEV BOOT=$HCAEMU_BOOT"
echo written > /etc/hcaemu-image-write && echo "WRITE-OK"
ibv_devices
if [ -z "$HCAEMU_SERVER_IP" ]; then
  qperf
  echo "QPERF-SERVER $?"
else
  qperf -cm1 $HCAEMU_SERVER_IP rc_bw rc_lat quit
  echo "QPERF-CLIENT $?"
fi
`
	out, code := hcaemuRun(t, "--guests", "2", "--image", "debian", "--packages", "qperf", "--timeout", "10m", "--", script)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	for k := 0; k < 2; k++ {
		mustContain(t, out, k,
			`IMAGE debian 13 SHELL=5\.[0-9.()a-z-]+ PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PWD=/tmp`,
			`HAS-READY`, `WRITE-OK`, `vmw_pvrdma0\s+[0-9a-f]{16}`)
	}
	mustContain(t, out, 0, `(?m)^ENV GUEST=0 SERVER= RDMA_DEV=vmw_pvrdma0 BOOT=1$`)
	mustContain(t, out, 1, `(?m)^ENV GUEST=1 SERVER=10\.0\.0\.1 RDMA_DEV=vmw_pvrdma0 BOOT=1$`)
	mustContain(t, out, 0, `QPERF-SERVER 0`)
	mustContain(t, out, 1, `rc_bw:`, `bw\s+=\s+[0-9.]+ [KMG]B/sec`, `rc_lat:`, `latency\s+=\s+[0-9.]+ (us|ms)`, `QPERF-CLIENT 0`)
	for _, l := range append(guestLines(out, 0), guestLines(out, 1)...) {
		if regexp.MustCompile(`(?i)failed|error`).MatchString(l) && !strings.Contains(l, "tainting") {
			t.Errorf("guest output: %s", l)
		}
	}
	// The image is cached: the same package set in another order builds
	// nothing.
	out, code = hcaemuRun(t, "--image", "debian", "--packages", "qperf,iproute2", "--", "command -v qperf")
	if code != 0 || strings.Contains(out, "hcaemu: provision:") {
		t.Errorf("second run (exit %d) provisioned again:\n%s", code, out)
	}
	mustContain(t, out, 0, `(?m)^/usr/bin/qperf$`)
}
