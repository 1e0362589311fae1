package tests

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// liveRun is an "hcaemu run" a test watches while it runs: its output as
// it comes, bounded waits that end early if the run does, its metrics
// (--metrics 127.0.0.1:0), and a share (/x in the guests) whose file
// "done" releases guests that wait for the test (wait_done in their
// script) before the run ends.
type liveRun struct {
	t     *testing.T
	out   lockedBuffer
	share string
	done  chan error
	ended bool
	err   error
}

// liveRunWaitDone is the guests' shell function that waits (bounded) for
// the test to write /x/done.
const liveRunWaitDone = `wait_done() { i=0; while [ ! -e /x/done ]; do i=$((i+1)); if [ $i -ge 6000 ]; then echo "TIMEOUT waiting for /x/done"; return 1; fi; sleep 0.1; done; }
`

// startRun starts "hcaemu run" with args (share is mounted at /x), and
// makes sure it ends with the test: the guests are released, the run
// waited for, and its output logged if the test failed (always, with
// logAlways).
func startRun(t *testing.T, share string, logAlways bool, args ...string) *liveRun {
	t.Helper()
	r := &liveRun{t: t, share: share, done: make(chan error, 1)}
	cmd := exec.Command(hcaemuBin, append([]string{"run", "--share", share + ":/x"}, args...)...)
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- cmd.Wait() }()
	t.Cleanup(func() {
		r.release()
		r.wait()
		if logAlways || t.Failed() {
			t.Logf("hcaemu run output:\n%s", r.out.String())
		}
	})
	return r
}

// release lets the guests waiting in wait_done go on.
func (r *liveRun) release() { os.WriteFile(filepath.Join(r.share, "done"), nil, 0o644) }

// wait waits for the run to end and returns how it ended.
func (r *liveRun) wait() error {
	if !r.ended {
		r.err, r.ended = <-r.done, true
	}
	return r.err
}

// poll waits (bounded) for cond, which may scrape; the run ending first
// fails the test.
func (r *liveRun) poll(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("no %s", what)
		}
		select {
		case err := <-r.done:
			r.err, r.ended = err, true
			r.t.Fatalf("hcaemu run ended while the test waited for %s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metricsURL is the address the run serves its metrics at, once it said.
func (r *liveRun) metricsURL() string {
	r.t.Helper()
	var url string
	r.poll("metrics address", func() bool {
		m := regexp.MustCompile(`hcaemu: metrics at (http://\S+/metrics)`).FindStringSubmatch(r.out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

// scrape reads url ("" when it cannot).
func scrape(url string) string {
	rsp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	return string(b)
}

// shared reports whether the guests wrote file name in the share.
func (r *liveRun) shared(name string) bool {
	_, err := os.Stat(filepath.Join(r.share, name))
	return err == nil
}
