package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// softRoCESteps are the tools TestE2ESoftRoCE runs between hcaemu and Linux
// soft-RoCE, each in both directions. Iterations are few: soft-RoCE runs
// all of RoCE in the TCG guest's kernel.
//
// perftest's QPs get a local ACK timeout of 1 s (-u 18) instead of its
// 67 ms (14): a TCG guest on a loaded machine stalls for half a second at
// times, and seven timeouts of 67 ms then end a requester's QP with
// RETRY_EXC_ERR though nothing was lost (seen with two CPU hogs and other
// tests on the 2 cores: soft-RoCE silent for 550 ms, then acknowledging all
// of hcaemu's eight copies at once). Soft-RoCE's side of such a step then
// never ends (it sent its WRITE to the QP gone 9281 times in 700 s), and
// the run waits for its timeout. The pingpongs' timeout is fixed (14).
var softRoCESteps = []string{
	"ibv_rc_pingpong -g 1 -c -n 20 -s 64",
	"ibv_rc_pingpong -g 1 -c -n 20 -s 10000",
	"ibv_ud_pingpong -g 1 -n 20 -s 64",
	"ibv_ud_pingpong -g 1 -n 20 -s 1024",
	"ibv_srq_pingpong -g 1 -n 20 -s 64",
	"ib_send_bw -x 1 -F -s 4096 -n 100 -u 18",
	"ib_write_bw -x 1 -F -s 4096 -n 100 -u 18",
	"ib_read_bw -x 1 -F -s 4096 -n 100 -u 18",
	"ib_send_bw -x 1 -F -s 65536 -n 20 -u 18",
	"ib_write_bw -x 1 -F -s 65536 -n 20 -u 18",
	"ib_read_bw -x 1 -F -s 65536 -n 20 -u 18",
	"ib_atomic_bw -x 1 -F -n 100 -u 18",
	"ib_send_lat -x 1 -F -n 100 -u 18",
	"ib_write_lat -x 1 -F -n 100 -u 18",
	"ib_read_lat -x 1 -F -n 100 -u 18",
}

// softRoCEScript runs every step twice in one boot: first guest 0 serves
// and guest 1 connects, then the other way round. The client retries
// (bounded) until its server listens.
func softRoCEScript() string {
	script := guestConnect + `me=$HCAEMU_GUEST
dev=$HCAEMU_RDMA_DEV
echo "DEVICE $dev"
failed=0
# stat: soft-RoCE's counters after each step (checkCapture reads whether
# its requester retransmitted in that step).
stat() {
  if [ "$dev" = rxe0 ]; then echo "RXESTAT $(rdma statistic show link rxe0/1 | tr '\n' ' ')"; fi
}
stat
# run SERVER CMD...: the guest SERVER runs CMD, the other connects to it.
run() {
  srv=$1; shift
  if [ "$me" = "$srv" ]; then
    "$@"
  else
    connect 10.0.0.$((srv+1)) "$@"
  fi
  st=$?
  echo "RESULT $st $srv $*"
  stat
  if [ $st -ne 0 ]; then failed=1; fi
}
rping_step() {
  srv=$1
  if [ "$me" = "$srv" ]; then
    rping -s -v -C 5 -a 10.0.0.$((srv+1))
    st=$?
    echo "RESULT $st $srv rping"
    stat
    if [ $st -ne 0 ]; then failed=1; fi
  else
    run $srv rping -c -v -C 5 -a
  fi
}
`
	for _, srv := range []int{0, 1} {
		for _, s := range softRoCESteps {
			tool, args, _ := strings.Cut(s, " ")
			script += fmt.Sprintf("run %d %s -d $dev %s\n", srv, tool, args)
		}
		script += fmt.Sprintf("rping_step %d\n", srv)
	}
	return script + "exit $failed\n"
}

// TestE2ESoftRoCE: hcaemu interoperates with Linux soft-RoCE. Guest 0 runs
// on hcaemu's vmw_pvrdma0, guest 1 on rxe0 over its vmxnet3 (--rxe 1), on
// the one segment: every verbs tool, RC, UD and SRQ, the perftest
// bandwidth and latency tests (SEND, WRITE, READ, atomics) and rping
// (rdma_cm over QP1), with hcaemu as the server and then as the client.
// The capture holds both sides' RoCEv2 frames, and an independent ICRC
// check accepts every one. The HCAs log at info, so that checkCapture
// learns which of hcaemu's QPs retransmitted (soft-RoCE's counters, printed
// after each step, say it for the other side).
func TestE2ESoftRoCE(t *testing.T) {
	needE2E(t)
	pcap := filepath.Join(t.TempDir(), "rxe.pcap")
	out, code := hcaemuRun(t, "--guests", "2", "--rxe", "1", "--timeout", "20m", "--pcap", pcap, "--log-level", "info", "--", softRoCEScript())
	mustContain(t, out, 0, "DEVICE vmw_pvrdma0")
	mustContain(t, out, 1, "DEVICE rxe0")
	for k, dev := range []string{"vmw_pvrdma0", "rxe0"} {
		for _, srv := range []int{0, 1} {
			for _, s := range softRoCESteps {
				tool, args, _ := strings.Cut(s, " ")
				mustContain(t, out, k, regexp.QuoteMeta(fmt.Sprintf("RESULT 0 %d %s -d %s %s", srv, tool, dev, args)))
			}
			mustContain(t, out, k, fmt.Sprintf("RESULT 0 %d rping", srv))
		}
	}
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	checkCapture(t, pcap, out)
}
