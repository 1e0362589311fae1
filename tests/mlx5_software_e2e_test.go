package tests

import (
	"regexp"
	"testing"
)

// TestE2EMLX5Software runs real software on mlx5_0, one guest talking to
// itself through the HCA (loopback by LID), under --strict fail.
//
// UCX's ucx_perftest over its direct-verbs
// transports (rc_mlx5 and ud_mlx5, which build WQEs themselves: NOP WQEs,
// an active message's header inline before its payload's data segments)
// and over the verbs ones, one process talking to itself through the HCA
// (loopback by LID; UCX_TLS without "self", so the HCA carries every
// message): tag matching latency, and RDMA WRITE bandwidth by ucp_put_bw
// with 64 KiB messages. The image has gdb besides ucx-utils: in an image
// of ucx-utils alone UCX stalls after creating its worker on any
// transport, self included (docs/software.md).
//
// libfabric's verbs provider: fi_pingpong over an RC endpoint (msg,
// rdma_cm on ib0's address) and a reliable datagram one (verbs;ofi_rxm),
// 200 × 4 KiB each.
func TestE2EMLX5Software(t *testing.T) {
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
export FI_VERBS_IFACE=ib0
ip=$(ip -4 -o addr show ib0 | sed 's/.*inet \([0-9.]*\).*/\1/')
fipp() {
  timeout -s KILL 90 fi_pingpong -p "$1" -e $2 -I 200 -S 4096 -s $ip > /tmp/fis.out 2>&1 &
  i=0
  while true; do
    timeout -s KILL 60 fi_pingpong -p "$1" -e $2 -I 200 -S 4096 $ip > /tmp/fic.out 2>&1; st=$?
    if [ $st = 0 ] || [ $i -ge 20 ]; then break; fi
    i=$((i+1)); sleep 0.5
  done
  wait
  grep -E '^4k' /tmp/fic.out
  echo "FI $st $1 $2"
}
fipp verbs msg
fipp 'verbs;ofi_rxm' rdm
`
	out, code := hcaemuRun(t, "--device", "mlx5", "--image", "debian", "--packages", "ucx-utils,gdb,libfabric-bin", "--strict", "fail", "--timeout", "8m", "--", script)
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
	mustContain(t, out, 0, `(?m)^4k\s+200\s+=200\s.*\nFI 0 verbs msg$`, `(?m)^4k\s+200\s+=200\s.*\nFI 0 verbs;ofi_rxm rdm$`)
}
