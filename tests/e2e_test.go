package tests

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The end-to-end tests boot real guests (the unmodified vmw_pvrdma driver
// and rdma-core) with "hcaemu run". They need provisioning (minutes on a
// fresh machine, cached after) and run when HCAEMU_E2E=1; .ci/run sets it.
// "go test -run Replay -update" re-records the replay goldens from real
// guests, so it builds hcaemu as well.

var hcaemuBin string

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if os.Getenv("HCAEMU_E2E") != "1" && !*update {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "hcaemu-e2e")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		hcaemuBin = filepath.Join(dir, "hcaemu")
		build := exec.Command("go", "build", "-o", hcaemuBin, "../cmd/hcaemu")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building hcaemu:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func needE2E(t *testing.T) {
	t.Helper()
	if hcaemuBin == "" {
		t.Skip("end-to-end test: set HCAEMU_E2E=1 (provisions QEMU and guests; .ci/run does)")
	}
}

// guestRetry defines run CMD...: in guest 0 (the server) it runs CMD once;
// in the others it appends the server's IP and retries until the server is
// listening (bounded; a connection refused is the only expected failure
// before that), then prints RESULT <status> <cmd>. Readiness (hcaemu run
// --ready) orders only the first step of a script: each later step starts a
// new server, so scripts of many steps still need it.
const guestRetry = `run() {
  if [ -z "$HCAEMU_SERVER_IP" ]; then
    "$@"
    st=$?
  else
    i=0
    while true; do
      "$@" $HCAEMU_SERVER_IP
      st=$?
      if [ $st -eq 0 ]; then break; fi
      i=$((i+1))
      if [ $i -ge 60 ]; then break; fi
      sleep 0.5
    done
  fi
  echo "RESULT $st $*"
  if [ $st -ne 0 ]; then failed=1; fi
  return $st
}
failed=0
`

// guestConnect defines connect ADDR CMD...: it runs CMD ADDR until it
// exits 0 (at most $CONNECT_TRIES times, 240 unless set, every 0.5 s: a
// server that does not listen yet refuses the connection) and returns its
// last status.
const guestConnect = `connect() {
  addr=$1; shift
  tries=0
  while true; do
    "$@" $addr
    cst=$?
    if [ $cst -eq 0 ]; then break; fi
    tries=$((tries+1))
    if [ $tries -ge ${CONNECT_TRIES:-240} ]; then break; fi
    sleep 0.5
  done
  return $cst
}
`

// hcaemuRun runs "hcaemu run" and returns its combined output and exit code.
func hcaemuRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(hcaemuBin, append([]string{"run"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hcaemu run: %v", err)
	}
	t.Logf("hcaemu run %s:\n%s", strings.Join(args, " "), out.String())
	return out.String(), code
}

// guestLines returns guest k's output lines (prefix removed).
func guestLines(out string, k int) []string {
	p := fmt.Sprintf("[g%d] ", k)
	var l []string
	for _, s := range strings.Split(out, "\n") {
		if strings.HasPrefix(s, p) {
			l = append(l, strings.TrimPrefix(s, p))
		}
	}
	return l
}

func mustContain(t *testing.T, out string, k int, patterns ...string) {
	t.Helper()
	g := strings.Join(guestLines(out, k), "\n")
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(g) {
			t.Errorf("guest %d output lacks %q", k, p)
		}
	}
}

func TestE2EBringUp(t *testing.T) {
	needE2E(t)
	script := guestWait + `
# u-root's grep keeps one -e: one grep per word.
dmesg | grep -i pvrdma
dmesg | grep -i infiniband
ibv_devices
ibv_devinfo -v
ibv_asyncwatch > /tmp/aw.out 2>&1 &
bounded '[ -n "$(pidsof ibv_asyncwatch)" ]'
aw=$(pidsof ibv_asyncwatch)
# Its first line is out once its context has an async event file.
bounded 'for f in /proc/$aw/fd/*; do readlink $f; done 2>/dev/null | grep -q infinibandevent'
kill $aw
bounded '! running $aw'
echo "ASYNCWATCH: $(cat /tmp/aw.out)"
`
	out, code := hcaemuRun(t, "--timeout", "5m", "--", script)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	mustContain(t, out, 0,
		`vmw_pvrdma0\s+[0-9a-f]{16}`,
		`state:\s+PORT_ACTIVE \(4\)`,
		`link_layer:\s+Ethernet`,
		`GID\[\s*1\]:\s+::ffff:10\.0\.0\.1, RoCE v2`,
		`ASYNCWATCH: .*vmw_pvrdma0`,
		`vendor_part_id:\s+2080`)
	for _, l := range guestLines(out, 0) {
		if regexp.MustCompile(`(?i)pvrdma.*(fail|error)`).MatchString(l) && !strings.Contains(l, "tainting kernel") {
			t.Errorf("driver error: %s", l)
		}
	}
}

// perftest and pingpong clients retry until the server in guest 0 listens.
func TestE2EDataPath(t *testing.T) {
	needE2E(t)
	pcap := filepath.Join(t.TempDir(), "dp.pcap")
	steps := []string{
		"ibv_rc_pingpong -g 1 -c -n 50 -s 64",
		"ibv_rc_pingpong -g 1 -c -n 50 -s 10000",
		"ibv_ud_pingpong -g 1 -n 50 -s 64",
		"ibv_ud_pingpong -g 1 -n 50 -s 1024",
		"ibv_srq_pingpong -g 1 -n 50 -s 64",
		"ibv_srq_pingpong -g 1 -n 50 -s 10000",
		// 500 iterations of 64 KiB, not perftest's 5000: every frame of
		// this test is captured and decoded by tshark after (a capture of
		// the defaults is a gigabyte); the defaults run uncaptured in
		// TestE2EReadmeExamples.
		"ib_send_bw -x 1 -F -n 500",
		"ib_write_bw -x 1 -F -n 500",
		"ib_read_bw -x 1 -F -n 500",
		"ib_atomic_bw -x 1 -F",
		"ib_send_lat -x 1 -F",
		"ib_write_lat -x 1 -F",
		"ib_read_lat -x 1 -F",
	}
	script := guestRetry
	for _, s := range steps {
		script += "run " + s + "\n"
	}
	// rdma_cm: connection set up with CM MADs over the GSI QP (QP1).
	script += `if [ -z "$HCAEMU_SERVER_IP" ]; then
  rping -s -v -C 5 -a 10.0.0.1
  st=$?; echo "RESULT $st rping"; if [ $st -ne 0 ]; then failed=1; fi
else
  run rping -c -v -C 5 -a
fi
`
	// A UD message is one packet: ibv_ud_pingpong refuses sizes above the
	// port's active MTU (1024) before it sends anything.
	script += `ibv_ud_pingpong -g 1 -s 2048 -n 5 $HCAEMU_SERVER_IP; echo "UD-BIG-STATUS $?"` + "\n"
	script += `ibv_uc_pingpong -g 1 -n 5 $HCAEMU_SERVER_IP; echo "UC-STATUS $?"` + "\n" + "exit $failed\n"
	// --strict fail: the unmodified driver and provider make no mistake the
	// device can see (one would stop the run with exit 1).
	out, code := hcaemuRun(t, "--guests", "2", "--timeout", "15m", "--pcap", pcap, "--strict", "fail", "--", script)
	if strings.Contains(out, "driver mistake") {
		t.Errorf("strict mode found a mistake of the stock driver")
	}
	for k := 0; k < 2; k++ {
		for _, s := range steps {
			mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 "+s))
		}
		mustContain(t, out, k, `RESULT 0 rping`, `ping data: rdma-ping-4`)
		// UC QPs do not exist in vmw_pvrdma: creation fails at once.
		mustContain(t, out, k, `Couldn't create QP`, `UC-STATUS 1`)
		mustContain(t, out, k, regexp.QuoteMeta(`Requested size larger than port MTU (1024)`), `UD-BIG-STATUS 1`)
	}
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	checkCapture(t, pcap, out)
}
