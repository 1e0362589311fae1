package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// ipCmd runs ip(8) and fails the test on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestE2EUplink: guests of two hcaemu processes, as on two hosts, each run
// in a network namespace of its own with its own segment, joined through
// --uplink dev:IFACE by a veth pair between the namespaces (a real Linux
// network, nothing else on it). Guest 10.0.0.1 (run A) serves, guest
// 10.0.0.2 (run B, --guest-ip) connects: TCP for the tools' exchange,
// then RoCEv2 between the two HCAs (ibv_rc_pingpong -c, ib_write_bw).
func TestE2EUplink(t *testing.T) {
	needE2E(t)
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces); .ci/run runs as root")
	}
	nsA, nsB := fmt.Sprintf("hcaemu-t%d-a", os.Getpid()), fmt.Sprintf("hcaemu-t%d-b", os.Getpid())
	for _, ns := range []string{nsA, nsB} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ipCmd(t, "link", "add", "hcxa", "netns", nsA, "type", "veth", "peer", "name", "hcxb", "netns", nsB)
	ipCmd(t, "-n", nsA, "link", "set", "hcxa", "up")
	ipCmd(t, "-n", nsB, "link", "set", "hcxb", "up")

	server := `ibv_rc_pingpong -g 1 -c -n 50 -s 4096; echo "RESULT $? rc_pingpong"
ib_write_bw -x 1 -F -n 500; echo "RESULT $? write_bw"
`
	client := guestConnect + `run() {
  connect 10.0.0.1 "$@"
  echo "RESULT $? $1"
}
run ibv_rc_pingpong -g 1 -c -n 50 -s 4096
run ib_write_bw -x 1 -F -n 500
`
	runs := []struct {
		ns, dev string
		args    []string
		want    []string // in the run's output
		out     bytes.Buffer
		err     error
	}{
		{ns: nsA, dev: "hcxa", args: []string{"--guest-ip", "10.0.0.1/24", "--", server},
			want: []string{"RESULT 0 rc_pingpong", "RESULT 0 write_bw", "remote address: LID 0x0000, QPN 0x[0-9a-f]+, PSN 0x[0-9a-f]+, GID ::ffff:10.0.0.2"}},
		{ns: nsB, dev: "hcxb", args: []string{"--guest-ip", "10.0.0.2/24", "--", client},
			want: []string{"RESULT 0 ibv_rc_pingpong", "RESULT 0 ib_write_bw", "remote address: LID 0x0000, QPN 0x[0-9a-f]+, PSN 0x[0-9a-f]+, GID ::ffff:10.0.0.1"}},
	}
	var wg sync.WaitGroup
	for i := range runs {
		r := &runs[i]
		argv := append([]string{"netns", "exec", r.ns, hcaemuBin, "run", "--timeout", "10m", "--uplink", "dev:" + r.dev}, r.args...)
		cmd := exec.Command("ip", argv...)
		cmd.Stdout, cmd.Stderr = &r.out, &r.out
		wg.Go(func() { r.err = cmd.Run() })
	}
	wg.Wait()
	for i := range runs {
		r := &runs[i]
		t.Logf("run %c (%s):\n%s", 'A'+i, r.ns, r.out.String())
		if r.err != nil {
			t.Errorf("run %c: %v", 'A'+i, r.err)
		}
		for _, want := range r.want {
			if !regexp.MustCompile(want).MatchString(r.out.String()) {
				t.Errorf("run %c lacks %q", 'A'+i, want)
			}
		}
	}
}
