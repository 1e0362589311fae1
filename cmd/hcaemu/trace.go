package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/hca"
)

// traceQueue bounds the events queued for one trace client; beyond it
// events are lost (and the client told how many): a slow client never
// slows a device.
const traceQueue = 1 << 14

// traceHub is the devices' Tracer while at least one client of the control
// socket traces: it hands each event to the clients whose selection it
// matches. With no client the devices have no tracer and build no events.
type traceHub struct {
	h *hcas

	mu   sync.Mutex
	subs map[*traceSub]struct{}
}

// traceSub is one trace client: the events it selected, queued.
type traceSub struct {
	device string // "" with all
	qpn    uint32 // 0: every QP of device (and its device events)
	all    bool
	ch     chan hca.TraceEvent
	lost   uint64 // under the hub's mu
}

func (s *traceSub) wants(ev *hca.TraceEvent) bool {
	switch {
	case s.all:
		return true
	case ev.Device != s.device:
		return false
	}
	return s.qpn == 0 || ev.QPN == s.qpn
}

// Trace is called by the devices with their lock held: it never blocks.
func (hub *traceHub) Trace(ev *hca.TraceEvent) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for s := range hub.subs {
		if !s.wants(ev) {
			continue
		}
		select {
		case s.ch <- *ev:
		default:
			s.lost++
		}
	}
}

// active reports whether a client traces (a new device gets the tracer).
func (hub *traceHub) active() bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return len(hub.subs) > 0
}

// parseTraceWhat reads a selection: "all", a device ("hca0") or a QP of a
// device ("hca0:0x1a2b04" or decimal).
func parseTraceWhat(what string) (*traceSub, error) {
	s := &traceSub{}
	switch dev, qpn, hasQPN := strings.Cut(what, ":"); {
	case what == "all" || what == "":
		s.all = true
	case dev == "":
		return nil, fmt.Errorf("%q: want all, DEVICE or DEVICE:QPN", what)
	case hasQPN:
		n, err := strconv.ParseUint(qpn, 0, 24)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q: QPN %q is not a QP number (1 to 0xffffff)", what, qpn)
		}
		s.device, s.qpn = dev, uint32(n)
	default:
		s.device = dev
	}
	return s, nil
}

// open is the control socket's Tracer.
func (hub *traceHub) open(what string) (func(ctx context.Context, w io.Writer) error, error) {
	sub, err := parseTraceWhat(what)
	if err != nil {
		return nil, err
	}
	if !sub.all {
		known := false
		for _, d := range hub.h.live() {
			known = known || d.Name() == sub.device
		}
		if !known {
			return nil, fmt.Errorf("no device %q (inspect devices lists them)", sub.device)
		}
	}
	sub.ch = make(chan hca.TraceEvent, traceQueue)
	return func(ctx context.Context, w io.Writer) error {
		hub.subscribe(sub)
		defer hub.unsubscribe(sub)
		return sub.stream(ctx, w, hub)
	}, nil
}

func (hub *traceHub) subscribe(sub *traceSub) {
	hub.mu.Lock()
	first := len(hub.subs) == 0
	if hub.subs == nil {
		hub.subs = map[*traceSub]struct{}{}
	}
	hub.subs[sub] = struct{}{}
	hub.mu.Unlock()
	if first {
		for _, d := range hub.h.live() {
			d.SetTracer(hub)
		}
	}
}

func (hub *traceHub) unsubscribe(sub *traceSub) {
	hub.mu.Lock()
	delete(hub.subs, sub)
	last := len(hub.subs) == 0
	hub.mu.Unlock()
	if last {
		for _, d := range hub.h.live() {
			d.SetTracer(nil)
		}
	}
}

// stream writes the client's events as JSON lines until ctx ends; events
// lost to a full queue are reported as {"event":"lost","count":N} where
// they were lost.
func (sub *traceSub) stream(ctx context.Context, w io.Writer, hub *traceHub) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for {
		var ev hca.TraceEvent
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev = <-sub.ch:
		}
		hub.mu.Lock()
		lost := sub.lost
		sub.lost = 0
		hub.mu.Unlock()
		if lost > 0 {
			if err := enc.Encode(struct {
				Time  time.Time `json:"time"`
				Event string    `json:"event"`
				Count uint64    `json:"count"`
			}{time.Now(), "lost", lost}); err != nil {
				return err
			}
		}
		if err := enc.Encode(&ev); err != nil {
			return err
		}
		// Flush when nothing more is queued: batches under load, every
		// event when it is quiet.
		if len(sub.ch) == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

const traceUsage = `usage: hcaemu trace --control SOCK (--qp DEVICE:QPN | --device DEVICE | --all) [--count N]

Streams what the emulated HCAs of a running "hcaemu run" or "hcaemu serve
--control SOCK" do, as JSON lines: a work request taken from a send queue
(wqe), a packet sent (tx, or retransmit when its PSN was sent before) or
received (rx, and dropped when the QP refused it) with its opcode, PSN and
ACK syndrome, a completion written (cqe) with its status, a QP state
change (state), an async event (async), and on mlx5 a command run
(command, with its status). The names and the clock are the
fault log's, so the two read as one story. Runs until interrupted, until
the run ends, or after --count events. QPNs as the guest sees them
("ibv_rc_pingpong" prints them; "hcaemu inspect qps" lists them).
`

func traceMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	control := fs.String("control", "", "the control socket of hcaemu run (printed at its start) or hcaemu serve --control")
	qp := fs.String("qp", "", "trace one QP: DEVICE:QPN (hca0:0x1a2b04)")
	device := fs.String("device", "", "trace every QP of one device (hca0), and its device events")
	all := fs.Bool("all", false, "trace every device")
	count := fs.Int("count", 0, "stop after this many events (0: no limit)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, traceUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu trace: %v (see hcaemu trace -h)\n", err)
		return 2
	}
	var what string
	picked := 0
	if *qp != "" {
		what, picked = *qp, picked+1
		if !strings.Contains(*qp, ":") {
			fmt.Fprintf(stderr, "hcaemu trace: --qp %q: want DEVICE:QPN\n", *qp)
			return 2
		}
	}
	if *device != "" {
		what, picked = *device, picked+1
		if strings.Contains(*device, ":") {
			fmt.Fprintf(stderr, "hcaemu trace: --device %q: a device name (hca0); --qp takes DEVICE:QPN\n", *device)
			return 2
		}
	}
	if *all {
		what, picked = "all", picked+1
	}
	switch {
	case *control == "":
		fmt.Fprintln(stderr, "hcaemu trace: give --control SOCK")
		return 2
	case picked != 1:
		fmt.Fprintln(stderr, "hcaemu trace: give one of --qp DEVICE:QPN, --device DEVICE, --all")
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "hcaemu trace: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *count < 0:
		fmt.Fprintf(stderr, "hcaemu trace: --count %d: not a count\n", *count)
		return 2
	}
	if _, err := parseTraceWhat(what); err != nil {
		fmt.Fprintf(stderr, "hcaemu trace: %v\n", err)
		return 2
	}
	conn, err := net.DialTimeout("unix", *control, 5*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu trace: %v\n", err)
		return 1
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(fault.Request{Op: "trace", What: what}); err != nil {
		fmt.Fprintf(stderr, "hcaemu trace: %v\n", err)
		return 1
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu trace: control socket %s: %v\n", *control, err)
		return 1
	}
	var rsp fault.Response
	if err := json.Unmarshal(line, &rsp); err != nil || !rsp.OK {
		if err == nil {
			err = errors.New(rsp.Error)
		}
		fmt.Fprintf(stderr, "hcaemu trace: %v\n", err)
		return 1
	}
	for n := 0; *count == 0 || n < *count; n++ {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return 0 // the run ended
		}
		if _, err := stdout.Write(line); err != nil {
			return 1
		}
	}
	return 0
}
