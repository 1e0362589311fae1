package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/hca"
)

// The counters of the HCAs in Prometheus's text format (--metrics ADDR):
// github.com/prometheus/client_golang writes the exposition format (HELP,
// TYPE, label escaping, content negotiation) that a scraper expects. Each
// process has its own registry, and one collector that reads the live
// devices' counters at scrape time: nothing is done per packet for metrics.

func registerMetricsFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics", "", "serve the HCAs' counters in Prometheus text format at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0 picks one, printed at start)")
}

// metricsServer serves /metrics on a listener opened before the devices
// exist (so a bad address fails at once).
type metricsServer struct {
	l      net.Listener
	srv    *http.Server
	closed bool
}

// listenMetrics opens the metrics listener; addr "" is none.
func listenMetrics(addr string) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	return &metricsServer{l: l}, nil
}

// serve starts serving the counters of the devices hcas returns (nil: none
// yet) and of the fault plan, if any; it prints the address to stderr.
func (m *metricsServer) serve(stderr io.Writer, hcas func() *hcas, faults *faultSetup) {
	if m == nil {
		return
	}
	reg := prometheus.NewRegistry()
	var inj *fault.Injector
	if faults != nil {
		inj = faults.inj
	}
	reg.MustRegister(&metricsCollector{hcas: hcas, inj: inj})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "hcaemu: metrics at http://%s/metrics\n", m.l.Addr())
	go m.srv.Serve(m.l)
}

// close stops serving (later calls do nothing).
func (m *metricsServer) close() {
	if m == nil || m.closed {
		return
	}
	m.closed = true
	if m.srv == nil {
		m.l.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		m.srv.Close()
	}
}

// Metric descriptions. Per-QP series exist while the QP does; the device_
// ones are every QP's, the destroyed ones' included (they never go back).
var (
	labelsQP = []string{"device", "qpn"}

	descPortFrames   = prometheus.NewDesc("hcaemu_port_frames_total", "Frames through port 1 of the HCA: Ethernet frames (PVRDMA), InfiniBand packets from LRH to VCRC (mlx5).", []string{"device", "dir"}, nil)
	descPortBytes    = prometheus.NewDesc("hcaemu_port_bytes_total", "Bytes of the frames through port 1 of the HCA (Ethernet frames; mlx5: IB packets).", []string{"device", "dir"}, nil)
	descLost         = prometheus.NewDesc("hcaemu_device_entries_lost_total", "Async events and CQ notifications the device could not post to the driver's rings (full, broken or not mapped), by ring.", []string{"device", "ring"}, nil)
	descPortDropped  = prometheus.NewDesc("hcaemu_port_dropped_frames_total", "Frames dropped before a QP took them (or lost to a port held down), by reason.", []string{"device", "reason"}, nil)
	descCommands     = prometheus.NewDesc("hcaemu_commands_total", "Commands of the driver's command channel, by command and errno (0: success).", []string{"device", "command", "errno"}, nil)
	descFindings     = prometheus.NewDesc("hcaemu_strict_findings_total", "Strict-mode findings (driver mistakes) by kind.", []string{"device", "kind"}, nil)
	descSegment      = prometheus.NewDesc("hcaemu_segment_frames_total", "Frames on the Ethernet segment (guests' NICs, HCAs' ports, uplink) by outcome: forwarded, flooded, dropped (nobody took it, or its sender gave up on it after its receiver stayed paused for the pause limit), paused (an offer a full receiver refused: the sender offers the frame again), spoofed (another station's MAC or HCA address as source), cam_full (source MAC not learnt).", []string{"outcome"}, nil)
	descDirectRuns   = prometheus.NewDesc("hcaemu_segment_direct_run_packets_total", "Packets among the direct ones that went inside runs: MIDDLE packets of one message handed over as one, taken by the receiver in one step.", nil, nil)
	descDirectLent   = prometheus.NewDesc("hcaemu_segment_direct_lent_packets_total", "Packets among the run ones whose payload the sending HCA lent: copied once, from its guest memory straight into the receiver's.", nil, nil)
	descDirect       = prometheus.NewDesc("hcaemu_segment_direct_packets_total", "Packets among the forwarded ones that went from HCA to HCA of this process without frames (nothing watched the wire: no capture, no fault rule).", nil, nil)
	descSubnet       = prometheus.NewDesc("hcaemu_subnet_packets_total", "Packets on the InfiniBand subnet (--device mlx5) by outcome: forwarded (delivered to a port, each multicast copy once), paused (an offer a full receiver refused: offered again), dropped (a multicast copy or SA answer refused, a group with no receiver), malformed (a bad LRH or GRH), spoofed (an SLID or SGID not its port's), refused (SMPs: QP0 or VL15), unroutable (no port or group for the DLID).", []string{"outcome"}, nil)
	descSubnetDirect = prometheus.NewDesc("hcaemu_subnet_direct_packets_total", "Packets among the subnet's forwarded ones that went from HCA to HCA of this process in batches, without whole IB packets (nothing watched the subnet: no capture, no fault rule), by kind: all of them, those inside runs, those of runs whose payload was lent (copied once).", []string{"kind"}, nil)
	descSA           = prometheus.NewDesc("hcaemu_subnet_sa_mads_total", "MADs that reached the subnet's SA, by outcome: answered, dropped (not a valid SA request).", []string{"outcome"}, nil)
	descFaultMatch   = prometheus.NewDesc("hcaemu_fault_matched_total", "Events a fault rule matched.", []string{"rule"}, nil)
	descFaultFired   = prometheus.NewDesc("hcaemu_fault_fired_total", "Times a fault rule fired.", []string{"rule"}, nil)

	qpDescs  = newQPDescs("hcaemu_qp_", labelsQP, "of the QP")
	devDescs = newQPDescs("hcaemu_device_", []string{"device"}, "of every QP of the HCA, destroyed ones included")
)

// qpMetricDescs describe the QPStats, per QP or per device.
type qpMetricDescs struct {
	packets, bytes, retransmitted, timeouts, naks, rnrNAKs, duplicates, outOfSequence *prometheus.Desc
}

func newQPDescs(prefix string, labels []string, of string) qpMetricDescs {
	with := func(extra ...string) []string { return append(append([]string(nil), labels...), extra...) }
	return qpMetricDescs{
		packets:       prometheus.NewDesc(prefix+"packets_total", "RoCE packets "+of+", by direction.", with("dir"), nil),
		bytes:         prometheus.NewDesc(prefix+"payload_bytes_total", "Payload bytes of the RoCE packets "+of+", by direction.", with("dir"), nil),
		retransmitted: prometheus.NewDesc(prefix+"retransmitted_packets_total", "Request packets sent again "+of+" (timeouts, sequence NAKs, RNR waits).", labels, nil),
		timeouts:      prometheus.NewDesc(prefix+"timeouts_total", "Retransmission timeouts "+of+".", labels, nil),
		naks:          prometheus.NewDesc(prefix+"naks_total", "NAKs sent (responder) and received (requester) "+of+", by syndrome.", with("dir", "syndrome"), nil),
		rnrNAKs:       prometheus.NewDesc(prefix+"rnr_naks_total", "RNR NAKs sent and received "+of+".", with("dir"), nil),
		duplicates:    prometheus.NewDesc(prefix+"duplicate_requests_total", "Duplicate requests received "+of+".", labels, nil),
		outOfSequence: prometheus.NewDesc(prefix+"out_of_sequence_total", "Requests ahead of the expected PSN, dropped, "+of+".", labels, nil),
	}
}

// metricsCollector reads the counters at scrape time.
type metricsCollector struct {
	hcas func() *hcas
	inj  *fault.Injector
}

// Describe sends nothing: the collector is unchecked (its series come and
// go with QPs and rules).
func (c *metricsCollector) Describe(chan<- *prometheus.Desc) {}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if h := c.hcas(); h != nil {
		sw := h.sw
		for _, o := range []struct {
			outcome string
			n       uint64
		}{{"forwarded", sw.Forwarded.Load()}, {"flooded", sw.Flooded.Load()}, {"dropped", sw.Dropped.Load()},
			{"paused", sw.Paused.Load()}, {"spoofed", sw.Spoofed.Load()}, {"cam_full", sw.CAMFull.Load()}} {
			counter(descSegment, o.n, o.outcome)
		}
		counter(descDirect, sw.Direct.Load())
		counter(descDirectRuns, sw.DirectRuns.Load())
		counter(descDirectLent, sw.DirectLent.Load())
		for _, dev := range h.live() {
			name := dev.Name()
			st, qps := dev.CoreStats()
			p := &st.Port
			counter(descPortFrames, p.FramesIn, name, "in")
			counter(descPortFrames, p.FramesOut, name, "out")
			counter(descPortBytes, p.BytesIn, name, "in")
			counter(descPortBytes, p.BytesOut, name, "out")
			for _, r := range []struct {
				reason string
				n      uint64
			}{{"malformed", p.Malformed}, {"bad_icrc", p.BadICRC}, {"no_qp", p.NoQP}, {"address", p.Address}, {"qkey", p.QKey}, {"port_down", p.PortDown}, {"revoked", p.Revoked}, {"rx_queue_full", p.RxQueueFull}} {
				counter(descPortDropped, r.n, name, r.reason)
			}
			counter(descLost, st.EventsLost, name, "async_event")
			counter(descLost, st.CQNotificationsLost, name, "cq_notification")
			for _, cmd := range st.Commands {
				counter(descCommands, cmd.Count, name, cmd.Command, strconv.FormatUint(uint64(cmd.Errno), 10))
			}
			for kind, n := range st.Findings {
				counter(descFindings, n, name, kind)
			}
			collectQP(counter, devDescs, &st.QPs, name)
			for qpn, qs := range qps {
				collectQP(counter, qpDescs, &qs, name, "0x"+strconv.FormatUint(uint64(qpn), 16))
			}
			for _, m := range dev.ModelStats() {
				ch <- prometheus.MustNewConstMetric(modelDesc(dev.Model(), m), prometheus.CounterValue, float64(m.Value), name)
			}
		}
		if sub := h.ib; sub != nil {
			for _, o := range []struct {
				outcome string
				n       uint64
			}{{"forwarded", sub.Forwarded.Load()}, {"paused", sub.Paused.Load()}, {"dropped", sub.Dropped.Load()},
				{"malformed", sub.Malformed.Load()}, {"spoofed", sub.Spoofed.Load()}, {"refused", sub.Refused.Load()},
				{"unroutable", sub.Unroutable.Load()}} {
				counter(descSubnet, o.n, o.outcome)
			}
			counter(descSubnetDirect, sub.Direct.Load(), "all")
			counter(descSubnetDirect, sub.DirectRuns.Load(), "runs")
			counter(descSubnetDirect, sub.DirectLent.Load(), "lent")
			counter(descSA, sub.SARequests.Load(), "answered")
			counter(descSA, sub.SADropped.Load(), "dropped")
		}
	}
	if c.inj != nil {
		for _, r := range c.inj.Stats().Rules {
			counter(descFaultMatch, r.Matched, r.Name)
			counter(descFaultFired, r.Fired, r.Name)
		}
	}
}

// modelDescs are the descriptions of the models' own counters, made at
// their first scrape.
var (
	modelDescsMu sync.Mutex
	modelDescs   = map[string]*prometheus.Desc{}
)

// modelDesc describes counter m of model: hcaemu_<model>_<name>_total,
// labelled with the device.
func modelDesc(model string, m hca.NamedCount) *prometheus.Desc {
	name := "hcaemu_" + model + "_" + m.Name + "_total"
	modelDescsMu.Lock()
	defer modelDescsMu.Unlock()
	d := modelDescs[name]
	if d == nil {
		d = prometheus.NewDesc(name, m.Help, []string{"device"}, nil)
		modelDescs[name] = d
	}
	return d
}

func collectQP(counter func(*prometheus.Desc, uint64, ...string), d qpMetricDescs, s *hca.QPStats, labels ...string) {
	with := func(extra ...string) []string { return append(append([]string(nil), labels...), extra...) }
	counter(d.packets, s.PacketsSent, with("sent")...)
	counter(d.packets, s.PacketsReceived, with("received")...)
	counter(d.bytes, s.BytesSent, with("sent")...)
	counter(d.bytes, s.BytesReceived, with("received")...)
	counter(d.retransmitted, s.Retransmitted, labels...)
	counter(d.timeouts, s.Timeouts, labels...)
	for _, n := range []struct {
		dir  string
		naks *hca.NAKCounts
	}{{"sent", &s.NAKsSent}, {"received", &s.NAKsReceived}} {
		counter(d.naks, n.naks.PSNSequence, with(n.dir, "psn_sequence")...)
		counter(d.naks, n.naks.InvalidRequest, with(n.dir, "invalid_request")...)
		counter(d.naks, n.naks.RemoteAccess, with(n.dir, "remote_access")...)
		counter(d.naks, n.naks.RemoteOperational, with(n.dir, "remote_operational")...)
		counter(d.naks, n.naks.InvalidRDRequest, with(n.dir, "invalid_rd_request")...)
	}
	counter(d.rnrNAKs, s.RNRNAKsSent, with("sent")...)
	counter(d.rnrNAKs, s.RNRNAKsReceived, with("received")...)
	counter(d.duplicates, s.Duplicates, labels...)
	counter(d.outOfSequence, s.OutOfSequence, labels...)
}
