package tests

import (
	"regexp"
	"testing"
)

// TestE2EMLX5UCX runs UCX's ucx_perftest on mlx5_0 over its direct-verbs
// transports (rc_mlx5 and ud_mlx5, which build WQEs themselves: NOP WQEs,
// an active message's header inline before its payload's data segments)
// and over the verbs ones, one process talking to itself through the HCA
// (loopback by LID; UCX_TLS without "self", so the HCA carries every
// message): tag matching latency, and RDMA WRITE bandwidth by ucp_put_bw
// with 64 KiB messages, under --strict fail. The image has gdb besides
// ucx-utils: in an image of ucx-utils alone UCX stalls after creating its
// worker on any transport, self included (docs/software.md).
func TestE2EMLX5UCX(t *testing.T) {
	needE2E(t)
	script := `export UCX_NET_DEVICES=mlx5_0:1
run() {
  tls=$1; shift
  UCX_TLS=$tls timeout -s KILL 120 ucx_perftest -P 0 -l "$@" > /tmp/ucx.out 2>&1; st=$?
  grep 'UCX  ERROR' /tmp/ucx.out | head -3
  grep '^Final:' /tmp/ucx.out
  echo "UCX $st $tls $*"
}
run rc_mlx5,ud_mlx5 -t tag_lat -n 1000
run ud_mlx5 -t tag_lat -n 1000
run rc_verbs,ud_verbs -t tag_lat -n 1000
run rc_mlx5,ud_mlx5 -t ucp_put_bw -s 65536 -n 200
run rc_mlx5,ud_mlx5 -t tag_bw -s 65536 -n 200
`
	out, code := hcaemuRun(t, "--device", "mlx5", "--image", "debian", "--packages", "ucx-utils,gdb", "--strict", "fail", "--timeout", "8m", "--", script)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	for _, run := range []string{
		"rc_mlx5,ud_mlx5 -t tag_lat -n 1000", "ud_mlx5 -t tag_lat -n 1000", "rc_verbs,ud_verbs -t tag_lat -n 1000",
		"rc_mlx5,ud_mlx5 -t ucp_put_bw -s 65536 -n 200", "rc_mlx5,ud_mlx5 -t tag_bw -s 65536 -n 200",
	} {
		n := "1000"
		if m := regexp.MustCompile(`-n (\d+)`).FindStringSubmatch(run); m != nil {
			n = m[1]
		}
		mustContain(t, out, 0, `(?m)^Final:\s+`+n+`\s+[0-9.]+\s+[0-9.]+.*\nUCX 0 `+regexp.QuoteMeta(run)+`$`)
	}
}
