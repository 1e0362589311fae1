package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is an io.Writer the test can read while a process writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// metricValue returns the value of the series line (name and labels as
// written), or -1.
func metricValue(scrape, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestE2EMetrics: "hcaemu run --metrics" serves the HCAs' counters while
// two guests run ib_write_bw (64 KiB WRITEs for 8 s): scraped during the
// run, guest 1's sent payload bytes move; scraped after it (the guests
// wait for the test), the payload bytes guest 1's HCA sent equal those
// guest 0's received, in whole 64 KiB WRITEs, at least what perftest
// measured, nothing retransmitted (no loss); the port's frame counters
// agree with the packet counters.
func TestE2EMetrics(t *testing.T) {
	needE2E(t)
	share := t.TempDir()
	script := liveRunWaitDone + `if [ -z "$HCAEMU_SERVER_IP" ]; then
  ib_write_bw -x 1 -F -s 65536 -D 8 > /x/g0.bw 2>&1
else
  ib_write_bw -x 1 -F -s 65536 -D 8 $HCAEMU_SERVER_IP > /x/g1.bw 2>&1
fi
st=$?
cat /x/g$HCAEMU_GUEST.bw
: > /x/g$HCAEMU_GUEST.done
echo "BW $st"
wait_done
exit $st
`
	control := filepath.Join(t.TempDir(), "control.sock")
	r := startRun(t, share, true, "--guests", "2", "--metrics", "127.0.0.1:0", "--control", control, "--timeout", "10m", "--", script)
	url := r.metricsURL()
	poll := r.poll
	scrape := func() string { return scrape(url) }
	const sent = `hcaemu_device_payload_bytes_total{device="hca1",dir="sent"}`
	bwDone := func(k int) bool { return r.shared("g" + strconv.Itoa(k) + ".done") }
	// During the run: guest 1's HCA sends, and the counter moves.
	var first float64
	poll("payload bytes sent by hca1", func() bool { first = metricValue(scrape(), sent); return first > 0 })
	var second float64
	poll("the sent bytes moving", func() bool { second = metricValue(scrape(), sent); return second > first })
	if bwDone(1) {
		t.Logf("note: ib_write_bw had finished by the second scrape")
	}
	t.Logf("during ib_write_bw: hca1 sent %.0f, then %.0f payload bytes", first, second)

	poll("both ib_write_bw results", func() bool { return bwDone(0) && bwDone(1) })
	final := scrape()
	bw, err := os.ReadFile(filepath.Join(share, "g1.bw"))
	if err != nil {
		t.Fatal(err)
	}
	// perftest's result line: bytes, iterations, BW peak, BW average, MsgRate.
	m := regexp.MustCompile(`(?m)^\s*65536\s+(\d+)\s+[0-9.]+\s+([0-9.]+)`).FindStringSubmatch(string(bw))
	if m == nil {
		t.Fatalf("no result line in guest 1's ib_write_bw output:\n%s", bw)
	}
	iters, _ := strconv.ParseFloat(m[1], 64)
	want := iters * 65536
	got := map[string]float64{
		"hca1 payload sent":     metricValue(final, sent),
		"hca0 payload received": metricValue(final, `hcaemu_device_payload_bytes_total{device="hca0",dir="received"}`),
		"hca1 retransmitted":    metricValue(final, `hcaemu_device_retransmitted_packets_total{device="hca1"}`),
		"hca1 packets sent":     metricValue(final, `hcaemu_device_packets_total{device="hca1",dir="sent"}`),
		"hca1 frames out":       metricValue(final, `hcaemu_port_frames_total{device="hca1",dir="out"}`),
		"hca0 packets received": metricValue(final, `hcaemu_device_packets_total{device="hca0",dir="received"}`),
		"hca0 frames in":        metricValue(final, `hcaemu_port_frames_total{device="hca0",dir="in"}`),
	}
	t.Logf("perftest: %.0f iterations of 65536 bytes (%.0f bytes, %s MB/s); metrics: %v", iters, want, m[2], got)
	// With -D, perftest counts only the iterations of its measurement
	// window (it runs a warm-up before and drains after), so the HCA
	// moved at least that much; what one sent the other received, whole
	// 64 KiB WRITEs, nothing twice.
	sentBytes, recvBytes := got["hca1 payload sent"], got["hca0 payload received"]
	if sentBytes < want || sentBytes != recvBytes || int64(sentBytes)%65536 != 0 || got["hca1 retransmitted"] != 0 {
		t.Errorf("payload bytes: hca1 sent %.0f, hca0 received %.0f, %.0f retransmitted; perftest measured %.0f",
			sentBytes, recvBytes, got["hca1 retransmitted"], want)
	}
	// 64 KiB at PMTU 1024: 64 packets a WRITE; the port carries those and
	// the GSI's few (none: perftest -F exchanges over TCP).
	if got["hca1 packets sent"] < sentBytes/1024 || got["hca1 frames out"] != got["hca1 packets sent"] || got["hca0 frames in"] < got["hca0 packets received"] {
		t.Errorf("packets: %v; want ≥ %.0f sent, frames out = packets sent", got, sentBytes/1024)
	}
	// hcaemu inspect stats reads the same counters over the control socket.
	js, err := exec.Command(hcaemuBin, "inspect", "--control", control, "--json", "stats").CombinedOutput()
	if err != nil {
		t.Fatalf("inspect --json stats: %v\n%s", err, js)
	}
	var stats []struct {
		Device string
		Stats  struct {
			Device struct {
				Port struct {
					FramesOut uint64 `json:"frames_out"`
				} `json:"port"`
				QPs struct {
					BytesSent     uint64 `json:"bytes_sent"`
					BytesReceived uint64 `json:"bytes_received"`
				} `json:"qps"`
			}
		}
	}
	if err := json.Unmarshal(js, &stats); err != nil || len(stats) != 2 {
		t.Fatalf("inspect --json stats: %v\n%s", err, js)
	}
	for _, d := range stats {
		switch d.Device {
		case "hca0":
			if float64(d.Stats.Device.QPs.BytesReceived) != recvBytes {
				t.Errorf("inspect stats: hca0 received %d payload bytes, metrics %.0f", d.Stats.Device.QPs.BytesReceived, recvBytes)
			}
		case "hca1":
			if float64(d.Stats.Device.QPs.BytesSent) != sentBytes || float64(d.Stats.Device.Port.FramesOut) != got["hca1 frames out"] {
				t.Errorf("inspect stats: hca1 sent %d payload bytes in %d frames, metrics %.0f in %.0f", d.Stats.Device.QPs.BytesSent, d.Stats.Device.Port.FramesOut, sentBytes, got["hca1 frames out"])
			}
		}
	}
	text, err := exec.Command(hcaemuBin, "inspect", "--control", control, "stats").CombinedOutput()
	if err != nil {
		t.Errorf("inspect stats: %v\n%s", err, text)
	}
	t.Logf("hcaemu inspect stats:\n%s", text)
	var series []string
	for _, line := range strings.Split(final, "\n") {
		if strings.HasPrefix(line, "hcaemu_") && !strings.HasSuffix(line, " 0") {
			series = append(series, line)
		}
	}
	t.Logf("metrics after the run (series not 0):\n%s", strings.Join(series, "\n"))
	r.release()
	if err := r.wait(); err != nil {
		t.Errorf("hcaemu run: %v", err)
	}
	out := &r.out
	for k := 0; k < 2; k++ {
		mustContain(t, out.String(), k, `(?m)^BW 0$`)
	}
}
