package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mlx5SoftwareStep is one step of testdata/software/mlx5.sh and the
// payload bytes its traffic must at least have made each HCA send and
// receive (the HCAs' counters, read before and after it: the tools'
// numbers went through the devices, not around them).
type mlx5SoftwareStep struct {
	name string
	// client is guest 1's result line that says the tool did its work.
	client string
	// min is the least payload hca1 sent to hca0 and hca0 received (to),
	// and hca0 sent to hca1 and hca1 received (from).
	to, from float64
}

// mlx5SoftwareSteps: ucx_perftest's tag_lat is a pingpong of 1000 8-byte
// messages (and its warm-up), ucp_put_bw and tag_bw 200 WRITEs or
// messages of 64 KiB one way; fi_pingpong 200 × 4 KiB each way; qperf's
// bytes are what it reports (checked in checkQperf).
var mlx5SoftwareSteps = []mlx5SoftwareStep{
	// NVMe-oF: the host writes 16 MiB (the target READs them from hca1)
	// and reads them back (the target WRITEs them to hca1).
	{"nvme", `(?m)^STEP nvme-disconnect 0$`, 16 << 20, 16 << 20},
	{"ucx-lat-rc", `(?m)^Final:\s+1000\s+[0-9.]+\s+[0-9.]+`, 8000, 8000},
	{"ucx-lat-ud", `(?m)^Final:\s+1000\s+[0-9.]+\s+[0-9.]+`, 8000, 8000},
	{"ucx-put-bw", `(?m)^Final:\s+200\s+[0-9.]+\s+[0-9.]+`, 200 * 65536, 0},
	{"ucx-tag-bw", `(?m)^Final:\s+200\s+[0-9.]+\s+[0-9.]+`, 200 * 65536, 0},
	{"fi-msg", `(?m)^4k\s+200\s+=200\s`, 200 * 4096, 200 * 4096},
	{"fi-rdm", `(?m)^4k\s+200\s+=200\s`, 200 * 4096, 200 * 4096},
	{"qperf", `(?s)rc_bw:.*rc_lat:.*ud_lat:.*ud_bw:.*quit:`, 0, 0},
}

// TestE2EMLX5Software runs real software between two guests on mlx5_0
// (testdata/software/mlx5.sh), under --strict fail, in one boot:
//
// An NVMe-oF/RDMA target (nvmet_rdma, configfs, a file-backed namespace
// on guest 0's IPoIB address) and host ("nvme connect -t rdma" in guest
// 1; testdata/nvme/nvmeof.sh): 16 MiB of random data written through the
// block device with O_DIRECT, read back and compared by SHA-256, then
// the disconnect (it drains the queues' QPs: mlx5_ib_drain_rq waits
// without a timeout for the flush of a receive posted in ERR). nvme_rdma
// registers its I/O buffers by fast registration
// (IB_DEVICE_MEM_MGT_EXTENSIONS: IB_MR_TYPE_MEM_REG MTT mkeys, UMR WQEs on
// its queues' QPs) and the target invalidates the host's keys with
// SEND_WITH_INV: the host's HCA must count a fast registration per I/O,
// and neither HCA may refuse a UMR.
//
// UCX's ucx_perftest over its direct-verbs transports (rc_mlx5 and
// ud_mlx5, which build WQEs themselves: NOP WQEs, an active message's
// header inline before its payload's data segments) and over the verbs
// ones (UCX_TLS has no self, shared memory or TCP): tag matching latency
// over rc_mlx5 with ud_mlx5 and ud_mlx5 alone, RDMA WRITE bandwidth by
// ucp_put_bw and tag_bw with 64 KiB messages over rc_mlx5; over rc_verbs
// with ud_verbs, tag_lat in guest 0 through its HCA in loopback, while
// guest 1 checks devlink health (below).
// The image has gdb besides ucx-utils: in an image of ucx-utils alone
// UCX stalls after creating its worker on any transport, self included
// (docs/software.md). libfabric's verbs provider: fi_pingpong over an RC
// endpoint (msg, rdma_cm on ib0's addresses) and a reliable datagram one
// (verbs;ofi_rxm), 200 × 4 KiB each. qperf: rc_bw, rc_lat, ud_lat and
// ud_bw, its listener on guest 0's IPoIB address, the QPs connected by
// rdma_cm. Both sides of every step exit 0; between two steps the test
// reads the HCAs' counters (--metrics), so each step's traffic is seen
// going through the two HCAs.
//
// Then devlink health in guest 1 (issue 26 item 4): mlx5_core's fw,
// fw_fatal and vnic reporters, healthy; a device_fatal fault (the health
// buffer's syndrome with the reset-request bit) with fw_fatal's
// auto_recover off: the reporter counts the error and stays in error, the
// fw reporter's diagnose shows the device's syndrome, "devlink health
// recover" recovers the function (error 1 recover 1, healthy); a second
// one with auto_recover on: the reporter recovers it itself (error 2
// recover 2); an RC pingpong on the recovered HCA.
func TestE2EMLX5Software(t *testing.T) {
	needE2E(t)
	share := shared(t, "software/mlx5.sh", "nvme/nvmeof.sh")
	r := startRun(t, share, false, "--device", "mlx5", "--guests", "2", "--image", "debian",
		"--packages", "gdb,libfabric-bin,nvme-cli,qperf,ucx-utils", "--ulp", "nvmet_rdma,nvme_rdma",
		"--strict", "fail", "--metrics", "127.0.0.1:0", "--timeout", "8m", "--", "bash /x/mlx5.sh")
	start := time.Now()
	url := r.metricsURL()
	series := func(dev, dir string) string {
		return fmt.Sprintf(`hcaemu_device_payload_bytes_total{device="%s",dir="%s"}`, dev, dir)
	}
	type payload struct{ sent0, recv0, sent1, recv1 float64 }
	read := func() payload {
		s := scrape(url)
		return payload{metricValue(s, series("hca0", "sent")), metricValue(s, series("hca0", "received")),
			metricValue(s, series("hca1", "sent")), metricValue(s, series("hca1", "received"))}
	}
	// ack lets guest 1 go on once the test has read the counters.
	ack := func(name string) {
		if err := os.WriteFile(filepath.Join(share, name+".ok"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.poll("guest 1's start", func() bool { return r.shared("g1.begin") })
	t.Logf("guests booted and started: %.1f s", time.Since(start).Seconds())
	prev := read()
	ack("begin")
	moved := map[string]payload{}
	var umrs string // the HCAs' UMR counters after NVMe-oF
	for _, s := range mlx5SoftwareSteps {
		r.poll("guest 1's step "+s.name, func() bool { return r.shared("g1." + s.name) })
		t.Logf("%s done: %.1f s", s.name, time.Since(start).Seconds())
		if s.name == "nvme" {
			umrs = scrape(url)
		}
		now := read()
		moved[s.name] = payload{now.sent0 - prev.sent0, now.recv0 - prev.recv0, now.sent1 - prev.sent1, now.recv1 - prev.recv1}
		prev = now
		ack(s.name)
	}
	err := r.wait()
	t.Logf("devlink health done, run ended: %.1f s", time.Since(start).Seconds())
	out := r.out.String()
	if err != nil {
		t.Errorf("hcaemu run: %v", err)
	}
	for _, s := range mlx5SoftwareSteps {
		step := regexp.QuoteMeta("STEP " + s.name + " 0")
		mustContain(t, out, 0, `(?m)^`+step+`$`)
		mustContain(t, out, 1, `(?m)^`+step+`$`)
		g1 := strings.Join(guestLines(out, 1), "\n")
		if i := strings.Index(g1, "STEP "+s.name+" "); i >= 0 {
			// The step's own output: after the previous step's line.
			j := strings.LastIndex(g1[:i], "STEP ")
			if j < 0 {
				j = 0
			}
			if !regexp.MustCompile(s.client).MatchString(g1[j:i]) {
				t.Errorf("%s: guest 1's output lacks %q", s.name, s.client)
			}
		}
		m := moved[s.name]
		to, from := s.to, s.from
		if s.name == "qperf" {
			to, from = qperfBytes(t, out)
		}
		t.Logf("%s: hca1 sent %.0f payload bytes, hca0 received %.0f; hca0 sent %.0f, hca1 received %.0f",
			s.name, m.sent1, m.recv0, m.sent0, m.recv1)
		if m.sent1 < to || m.recv0 < to || m.sent0 < from || m.recv1 < from {
			t.Errorf("%s: the HCAs moved hca1→hca0 %.0f/%.0f, hca0→hca1 %.0f/%.0f payload bytes (sent/received); the tool's traffic is at least %.0f and %.0f",
				s.name, m.sent1, m.recv0, m.sent0, m.recv1, to, from)
		}
	}
	checkMLX5NVMe(t, out, umrs)
	// UCX over rc_verbs and ud_verbs in guest 0, through its HCA in
	// loopback, while guest 1 checks devlink health.
	mustContain(t, out, 0, `(?m)^Final:\s+1000\s+[0-9.]+\s+[0-9.]+.*\nSTEP ucx-lat-verbs-lo 0$`, `(?m)^SOFTWARE-END$`)
	// What the tools measured (TCG guests), for docs/software.md.
	var results []string
	for _, l := range guestLines(out, 1) {
		if regexp.MustCompile(`^(Final:|4k\s|STEP |[a-z_]+:$|\s+(bw|latency|send_bw|recv_bw)\s+=)`).MatchString(l) &&
			!strings.HasPrefix(l, "STEP devlink") {
			results = append(results, l)
		}
	}
	t.Logf("guest 1's results:\n%s", strings.Join(results, "\n"))
	logMLX5StepTimes(t, out)
	checkMLX5Health(t, out) // (startRun logs the run's output if the test failed)
}

// checkMLX5NVMe checks the NVMe-oF step: the target up in guest 0, each
// of the host's steps in guest 1, the data read back as written; the
// host's HCA fast-registered at least one MTT mkey per 1 MiB I/O (32) and
// neither HCA refused a UMR WQE (metrics, read after the step).
func checkMLX5NVMe(t *testing.T, out, metrics string) {
	t.Helper()
	mustContain(t, out, 0, `(?m)^STEP nvmet 0$`)
	mustContain(t, out, 1, `(?m)^STEP nvme-connect 0$`, `(?m)^STEP nvme-write 0$`, `(?m)^STEP nvme-read 0$`)
	m := regexp.MustCompile(`NVME-SUMS ([0-9a-f]{64}) ([0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Errorf("the data read back through nvme-rdma differs from what was written: %v", m)
	}
	for _, c := range []struct {
		hca, name string
		min       float64
	}{
		{"hca1", "fast_reg_mtt", 32},
		{"hca0", "umr_refused", 0},
		{"hca1", "umr_refused", 0},
	} {
		got := metricValue(metrics, `hcaemu_mlx5_`+c.name+`_total{device="`+c.hca+`"}`)
		if c.min == 0 && got != 0 || got < c.min {
			t.Errorf("%s: hcaemu_mlx5_%s_total = %.0f after NVMe-oF, want %s %.0f", c.hca, c.name, got, map[bool]string{true: "=", false: "≥"}[c.min == 0], c.min)
		}
	}
	t.Logf("UMR metrics after NVMe-oF:\n%s", strings.Join(regexp.MustCompile(`(?m)^hcaemu_mlx5_(umr|fast_reg)\S+ \S+$`).FindAllString(metrics, -1), "\n"))
}

// qperfBytes returns the payload guest 1's qperf says went from guest 1
// to guest 0 (what guest 0 received of rc_bw and ud_bw, and guest 1's
// messages of rc_lat and ud_lat) and back (guest 0's messages of the
// latency tests), less 5 %: qperf rounds to three digits.
func qperfBytes(t *testing.T, out string) (to, from float64) {
	t.Helper()
	g1 := strings.Join(guestLines(out, 1), "\n")
	units := map[string]float64{"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}
	value := func(test, key string) float64 {
		m := regexp.MustCompile(`(?m)^` + test + `:\n(?: {4}.*\n)*? {4}` + key + ` +=\s+([0-9.,]+) (bytes|KB|MB|GB)\n`).FindStringSubmatch(g1)
		if m == nil {
			t.Errorf("qperf: no %s in %s's output", key, test)
			return 0
		}
		v, _ := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		return v * units[m[2]]
	}
	to = 0.95 * (value("rc_bw", "recv_bytes") + value("ud_bw", "recv_bytes") +
		value("rc_lat", "loc_send_bytes") + value("ud_lat", "loc_send_bytes"))
	from = 0.95 * (value("rc_lat", "rem_send_bytes") + value("ud_lat", "rem_send_bytes"))
	return to, from
}

// logMLX5StepTimes logs how long each step's server took to listen
// (guest 0) and its client to run (guest 1), from the scripts' "T NAME
// EVENT SECONDS" lines (each guest's own clock).
func logMLX5StepTimes(t *testing.T, out string) {
	t.Helper()
	at := map[string]float64{}
	for k := range 2 {
		for _, l := range guestLines(out, k) {
			if f := strings.Fields(l); len(f) == 4 && f[0] == "T" {
				v, err := strconv.ParseFloat(f[3], 64)
				if err == nil {
					at[f[1]+" "+f[2]] = v
				}
			}
		}
	}
	var lines []string
	for _, s := range mlx5SoftwareSteps {
		n := s.name
		lines = append(lines, fmt.Sprintf("%-14s server listening after %5.1f s, ended %5.1f s after; client ran %5.1f s",
			n, at[n+" listen"]-at[n+" start"], at[n+" end"]-at[n+" listen"], at[n+" done"]-at[n+" client"]))
	}
	lines = append(lines, fmt.Sprintf("ucx-lat-verbs-lo (guest 0, loopback) ran %5.1f s", at["ucx-lat-verbs-lo end"]-at["ucx-lat-verbs-lo start"]))
	t.Logf("steps:\n%s", strings.Join(lines, "\n"))
}

// checkMLX5Health checks guest 1's devlink health steps.
func checkMLX5Health(t *testing.T, out string) {
	t.Helper()
	mustContain(t, out, 1,
		`(?m)^DEVLINK pci/0000:00:04\.1$`,
		// Before: the three reporters of mlx5_core, healthy.
		`(?s)HEALTH BEGIN\npci/0000:00:04\.1:\n  reporter fw\n    state healthy error 0 recover 0 .*\n  reporter fw_fatal\n    state healthy error 0 recover 0 grace_period 60000 auto_recover true .*\n  reporter vnic\n    state healthy error 0 recover 0.*HEALTH END`,
		`(?m)^STEP devlink-set 0$`,
		`(?m)^FATAL1: state error error 1 recover 0 .*auto_recover false`,
		// The fw reporter reads the health buffer's syndrome.
		`(?m)^DIAGNOSE1:\s+Syndrome: 1 Description: firmware internal error$`,
		`(?m)^STEP devlink-recover 0$`,
		`(?m)^RECOVERED1: state healthy error 1 recover 1 `,
		`(?m)^DIAGNOSE2:\s+Syndrome: 0$`,
		`(?m)^STEP devlink-auto 0$`,
		`(?m)^RECOVERED2: state healthy error 2 recover 2 grace_period 0 auto_recover true`,
		`(?s)HEALTH END.*HEALTH BEGIN\npci/0000:00:04\.1:\n  reporter fw\n    state healthy error 0 recover 0 .*\n  reporter fw_fatal\n    state healthy error 2 recover 2 .*HEALTH END`,
		`(?m)^RECOVERY: 2$`,
		`20 iters in [0-9.]+ seconds`, `(?m)^STEP loopback 0$`, `(?m)^SOFTWARE-END$`)
	for _, rule := range []string{"fatal1", "fatal2"} {
		if m := regexp.MustCompile(`hcaemu: faults: rule ` + rule + `: fired ([0-9]+) `).FindStringSubmatch(out); m == nil || m[1] != "1" {
			t.Errorf("rule %s: %v, want fired 1", rule, m)
		}
	}
	for _, l := range guestLines(out, 1) {
		if strings.HasPrefix(l, "DUMP1:") {
			t.Logf("devlink health dump show of fw_fatal: %s", l)
		}
	}
}
