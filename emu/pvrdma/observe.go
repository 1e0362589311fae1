package pvrdma

import (
	"fmt"
	"io"

	"github.com/hcaemu/hcaemu/emu/hca"
)

// The device as hcaemu inspect, trace and the metrics see it
// (hca.Observed).

var _ hca.Observed = (*Device)(nil)

// Model implements hca.Observed.
func (d *Device) Model() string { return "pvrdma" }

// CoreStats implements hca.Observed: Stats.
func (d *Device) CoreStats() (hca.DeviceStats, map[uint32]hca.QPStats) { return d.Stats() }

// ModelStats implements hca.Observed: every PVRDMA counter is one of the
// core's.
func (d *Device) ModelStats() []hca.NamedCount { return nil }

// Observe implements hca.Observed.
func (d *Device) Observe() hca.Observation { st := d.Inspect(); return &st }

// StatsState is the "stats" section: the device's counters, and its live
// QPs'.
type StatsState struct {
	Counters    Counters
	Findings    map[string]uint64
	PinnedPages uint64
	Device      hca.DeviceStats
	QPs         []QPCounters
}

// QPCounters are one QP's counters.
type QPCounters struct {
	QPN   uint32
	Stats hca.QPStats
}

// Sections implements hca.Observation (no EQs).
func (st *State) Sections() hca.Sections {
	stats := &StatsState{Counters: st.Counters, Findings: st.Findings, PinnedPages: st.PinnedPages, Device: st.Stats}
	for _, q := range st.QPs {
		stats.QPs = append(stats.QPs, QPCounters{QPN: q.QPN, Stats: q.Stats})
	}
	return hca.Sections{Devices: st, Ports: st.Port, GIDs: st.GIDs, PDs: st.PDs, MRs: st.MRs, CQs: st.CQs,
		QPs: st.QPs, SRQs: st.SRQs, Stats: stats}
}

// Print implements hca.Observation.
func (st *State) Print(tw io.Writer, what string) {
	all := what == "devices"
	if all {
		fmt.Fprintf(tw, "  active=%v fatal=%v port=%s mac=%s\n", st.Active, st.Fatal, st.Port.State, st.Port.MAC)
	}
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
		hca.PrintCommands(tw, st.Stats.Commands, st.Findings)
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
