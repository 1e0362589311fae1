package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
)

// inspectWhat are the object kinds "hcaemu inspect" shows.
var inspectWhat = []string{"devices", "ports", "gids", "pds", "mrs", "cqs", "qps", "srqs", "stats"}

// inspected is one device's answer to inspect: its name and the section
// asked for (everything for "devices").
type inspected struct {
	Device  string
	Devices *pvrdma.State     `json:",omitempty"`
	Ports   *pvrdma.PortState `json:",omitempty"`
	GIDs    []pvrdma.GIDState `json:",omitempty"`
	PDs     []pvrdma.PDState  `json:",omitempty"`
	MRs     []pvrdma.MRState  `json:",omitempty"`
	CQs     []pvrdma.CQState  `json:",omitempty"`
	QPs     []pvrdma.QPState  `json:",omitempty"`
	SRQs    []pvrdma.SRQState `json:",omitempty"`
	Stats   *inspectedStats   `json:",omitempty"`
}

// inspectedStats are a device's counters, and its live QPs'.
type inspectedStats struct {
	Counters    pvrdma.Counters
	Findings    map[string]uint64
	PinnedPages uint64
	Device      hca.DeviceStats
	QPs         []qpCounters
}

// qpCounters are one QP's counters.
type qpCounters struct {
	QPN   uint32
	Stats hca.QPStats
}

// inspect is the control socket's inspector: what the live devices hold.
func (h *hcas) inspect(what string) (any, error) {
	if what == "" {
		what = "devices"
	}
	if !slices.Contains(inspectWhat, what) {
		return nil, fmt.Errorf("unknown %q: want %s", what, strings.Join(inspectWhat, ", "))
	}
	out := []inspected{}
	for _, d := range h.live() {
		st := d.Inspect()
		in := inspected{Device: st.Device}
		switch what {
		case "devices":
			in.Devices = &st
		case "ports":
			in.Ports = &st.Port
		case "gids":
			in.GIDs = st.GIDs
		case "pds":
			in.PDs = st.PDs
		case "mrs":
			in.MRs = st.MRs
		case "cqs":
			in.CQs = st.CQs
		case "qps":
			in.QPs = st.QPs
		case "srqs":
			in.SRQs = st.SRQs
		case "stats":
			in.Stats = &inspectedStats{Counters: st.Counters, Findings: st.Findings, PinnedPages: st.PinnedPages, Device: st.Stats}
			for _, q := range st.QPs {
				in.Stats.QPs = append(in.Stats.QPs, qpCounters{QPN: q.QPN, Stats: q.Stats})
			}
		}
		out = append(out, in)
	}
	return out, nil
}

const inspectUsage = `usage: hcaemu inspect --control SOCK [--json] [devices|ports|gids|pds|mrs|cqs|qps|srqs|stats]

Shows what the emulated HCAs of a running "hcaemu run" or "hcaemu serve
--control SOCK" hold: the device-side mirror of the guests' "rdma resource
show". QPs with their state, PSNs, outstanding requests, retry and RNR
counts and peer; MRs with keys, range, access and PD; CQs and rings with
their indices; strict-mode findings and drop counters (stats). Without an
argument: everything, per device.
`

func inspectMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	control := fs.String("control", "", "the control socket of hcaemu run (printed at its start) or hcaemu serve --control")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, inspectUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu inspect: %v (see hcaemu inspect -h)\n", err)
		return 2
	}
	if *control == "" {
		fmt.Fprintln(stderr, "hcaemu inspect: give --control SOCK")
		return 2
	}
	what := "devices"
	switch fs.NArg() {
	case 0:
	case 1:
		what = fs.Arg(0)
		if !slices.Contains(inspectWhat, what) {
			fmt.Fprintf(stderr, "hcaemu inspect: unknown %q: want %s\n", what, strings.Join(inspectWhat, ", "))
			return 2
		}
	default:
		fmt.Fprintf(stderr, "hcaemu inspect: one of %s, not %d arguments\n", strings.Join(inspectWhat, ", "), fs.NArg())
		return 2
	}
	rsp, err := controlCommand(*control, fault.Request{Op: "inspect", What: what})
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu inspect: %v\n", err)
		return 1
	}
	if !rsp.OK {
		fmt.Fprintf(stderr, "hcaemu inspect: %s\n", rsp.Error)
		return 1
	}
	if *asJSON {
		stdout.Write(rsp.Inspect)
		fmt.Fprintln(stdout)
		return 0
	}
	var devs []inspected
	if err := json.Unmarshal(rsp.Inspect, &devs); err != nil {
		fmt.Fprintf(stderr, "hcaemu inspect: bad answer: %v\n", err)
		return 1
	}
	printInspected(stdout, what, devs)
	return 0
}

// printInspected writes the answer as tables, one section per device.
func printInspected(w io.Writer, what string, devs []inspected) {
	if len(devs) == 0 {
		fmt.Fprintln(w, "no devices (no guest has connected yet)")
		return
	}
	for i, d := range devs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		st := d.Devices
		if st == nil {
			st = &pvrdma.State{Device: d.Device, GIDs: d.GIDs, PDs: d.PDs, MRs: d.MRs, CQs: d.CQs, QPs: d.QPs, SRQs: d.SRQs}
			if d.Ports != nil {
				st.Port = *d.Ports
			}
			if d.Stats != nil {
				st.Counters, st.Findings, st.PinnedPages, st.Stats = d.Stats.Counters, d.Stats.Findings, d.Stats.PinnedPages, d.Stats.Device
				for _, q := range d.Stats.QPs {
					st.QPs = append(st.QPs, pvrdma.QPState{QPN: q.QPN, Stats: q.Stats})
				}
			}
		}
		fmt.Fprintf(w, "%s", d.Device)
		if what == "devices" {
			fmt.Fprintf(w, ": active=%v fatal=%v port=%s mac=%s", st.Active, st.Fatal, st.Port.State, st.Port.MAC)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		all := what == "devices"
		if what == "ports" {
			fmt.Fprintf(tw, "  port 1\tstate %s\tmac %s\n", st.Port.State, st.Port.MAC)
		}
		if all || what == "gids" {
			for _, g := range st.GIDs {
				fmt.Fprintf(tw, "  gid %d\t%s\t%s\n", g.Index, g.GID, g.Type)
			}
		}
		if all || what == "pds" {
			for _, p := range st.PDs {
				fmt.Fprintf(tw, "  pd %d\tctx %d\tusers %d\n", p.Handle, p.Context, p.Users)
			}
		}
		if all || what == "mrs" {
			for _, m := range st.MRs {
				fmt.Fprintf(tw, "  mr %d\t%s\tpd %d\tlkey %#x rkey %#x\t[%#x, +%#x)\t%s\tvalid=%v\n",
					m.Handle, m.Kind, m.PD, m.LKey, m.RKey, m.Start, m.Length, m.Access, m.Valid)
			}
		}
		if all || what == "cqs" {
			for _, c := range st.CQs {
				fmt.Fprintf(tw, "  cq %d\tctx %d\tentries %d\tprod %d cons %d\tarmed %q\tbroken=%v\tusers %d\n",
					c.Handle, c.Context, c.Ring.Entries, c.Ring.Prod, c.Ring.Cons, c.Armed, c.Broken, c.Users)
			}
		}
		if all || what == "qps" {
			for _, q := range st.QPs {
				fmt.Fprintf(tw, "  qp %d\tqpn %#x\t%s %s\tpd %d\tsq %d/%d/%d", q.Handle, q.QPN, q.Type, q.State, q.PD,
					q.SQ.Entries, q.SQ.Prod, q.SQ.Cons)
				if q.RQ != nil {
					fmt.Fprintf(tw, "\trq %d/%d/%d", q.RQ.Entries, q.RQ.Prod, q.RQ.Cons)
				} else {
					fmt.Fprintf(tw, "\tsrq %d", q.SRQ)
				}
				if q.Peer != "" {
					fmt.Fprintf(tw, "\tpeer %s qpn %#x mtu %d", q.Peer, q.DestQPN, q.PathMTU)
				}
				if r := q.RC; r != nil {
					fmt.Fprintf(tw, "\tnext_psn %#x unacked %#x outstanding %d retries_left %d/%d rnr_left %d/%d expected_psn %#x msn %d",
						r.NextPSN, r.UnackedPSN, r.Outstanding, r.RetriesLeft, q.RetryCnt, r.RNRRetriesLeft, q.RNRRetry, r.ExpectedPSN, r.MSN)
				}
				fmt.Fprintln(tw)
			}
		}
		if all || what == "srqs" {
			for _, s := range st.SRQs {
				fmt.Fprintf(tw, "  srq %d\tpd %d\tentries %d\tprod %d cons %d\tlimit %d\tusers %d\n",
					s.Handle, s.PD, s.Ring.Entries, s.Ring.Prod, s.Ring.Cons, s.Limit, s.Users)
			}
		}
		if all || what == "stats" {
			p := &st.Stats.Port
			fmt.Fprintf(tw, "  port\tframes in %d out %d\tbytes in %d out %d\n", p.FramesIn, p.FramesOut, p.BytesIn, p.BytesOut)
			fmt.Fprintf(tw, "  dropped\tmalformed %d bad_icrc %d no_qp %d address %d qkey %d port_down %d revoked %d rx_queue_full %d\n",
				p.Malformed, p.BadICRC, p.NoQP, p.Address, p.QKey, p.PortDown, p.Revoked, p.RxQueueFull)
			fmt.Fprintf(tw, "  lost\tasync_events %d cq_notifications %d\n", st.Stats.EventsLost, st.Stats.CQNotificationsLost)
			fmt.Fprintf(tw, "  drops\tqkey_violations %d\t(since the last reset)\n", st.Counters.QKeyViolations)
			fmt.Fprintf(tw, "  pinned_pages\t%d\n", st.PinnedPages)
			printQPStats(tw, "  all qps", &st.Stats.QPs)
			for _, q := range st.QPs {
				printQPStats(tw, fmt.Sprintf("  qpn %#x", q.QPN), &q.Stats)
			}
			for _, c := range st.Stats.Commands {
				fmt.Fprintf(tw, "  command\t%s errno %d\t%d\n", c.Command, c.Errno, c.Count)
			}
			kinds := make([]string, 0, len(st.Findings))
			for k := range st.Findings {
				kinds = append(kinds, k)
			}
			slices.Sort(kinds)
			for _, k := range kinds {
				fmt.Fprintf(tw, "  findings\t%s %d\n", k, st.Findings[k])
			}
		}
		tw.Flush()
	}
}

// printQPStats writes a QP's counters (or every QP's) on one line.
func printQPStats(w io.Writer, name string, s *hca.QPStats) {
	naks := func(n *hca.NAKCounts) string {
		return fmt.Sprintf("seq %d inv %d acc %d op %d", n.PSNSequence, n.InvalidRequest, n.RemoteAccess, n.RemoteOperational)
	}
	fmt.Fprintf(w, "%s\tpackets out %d in %d\tbytes out %d in %d\tretransmitted %d timeouts %d\tnaks out [%s] in [%s]\trnr out %d in %d\tduplicates %d out_of_sequence %d\n",
		name, s.PacketsSent, s.PacketsReceived, s.BytesSent, s.BytesReceived, s.Retransmitted, s.Timeouts,
		naks(&s.NAKsSent), naks(&s.NAKsReceived), s.RNRNAKsSent, s.RNRNAKsReceived, s.Duplicates, s.OutOfSequence)
}
