package tests

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
	"github.com/hcaemu/hcaemu/vfio/record"
)

// The mlx5 goldens (testdata/replay/mlx5_rc_pingpong, recorded with
// hcaemu run --device mlx5 --record): each recording holds the ConnectX's
// register accesses and replies, its guest memory reads and writes, its
// interrupts, and the InfiniBand packets of its port (the header's link is
// "infiniband", with the port's LID, GUID and GID prefix).
//
// How the replay is made deterministic:
//
//   - The subnet. Every packet the port received while recording is in the
//     recording, the SA's answers to the driver's QP1 MADs (ib_ipoib's
//     path record queries and joins) as much as the peer's packets: the
//     replay feeds them all as inputs in their recorded order, and keeps
//     the device's packets off any subnet (they are compared, not
//     forwarded). No live SA answers, no peer device runs: nothing in the
//     replay depends on how two devices' goroutines interleave.
//   - The LID. The device is attached to a fresh subnet of the recorded GID
//     prefix, where ports of other GUIDs first take the LIDs below the
//     recorded one (the SM gives the lowest free LID): the device gets the
//     recorded LID from the subnet's SM as it did, and its recorded GUID
//     (the node GUID is the port's - 1). The replay checks it.
//   - Time. The replayed device is made with FrozenTimers: its RC
//     retransmission and RNR timers never expire, so a replay stalled on a
//     loaded machine (it waits until the device is idle after every
//     input, and the recorded ACK may come long after the packet) sends
//     nothing the recording does not have. The recordings have no timer
//     expiry in them (recordScenario records again when a packet was sent
//     twice). The command engine runs each command inside the doorbell
//     write that rings it, its CMD EQE (event mode) and interrupt raised
//     before the write returns; the health counter advances per read: both
//     follow the inputs alone. QPNs are handles (SequentialQPNs).

// replayMLX5 feeds rec into a fresh emulated ConnectX and returns the
// comparison.
func replayMLX5(t *testing.T, rec *record.Recording) *record.Result {
	t.Helper()
	return replayMLX5With(t, rec, mlx5ReplayOpts{})
}

// mlx5ReplayOpts tune a replay for tests of the replay itself.
type mlx5ReplayOpts struct {
	// stalls: after each of the first stalls RC packets that ask for an
	// ACK, the replay stalls for stall before the next input (the ACK),
	// as a loaded machine may.
	stalls int
	stall  time.Duration
	// liveTimers: the device's timers run on the wall clock.
	liveTimers bool
}

func replayMLX5With(t *testing.T, rec *record.Recording, o mlx5ReplayOpts) *record.Result {
	t.Helper()
	if rec.Link != record.LinkInfiniBand || rec.IB == nil {
		t.Fatalf("recording %s: link %q, want an InfiniBand port", rec.Name, rec.Link)
	}
	checkNoGoroutineLeak(t)
	sub := replaySubnet(t, rec.IB)
	rp := record.NewReplay(rec, record.Options{Frame: describeIBPacket, MemWrite: describeMLX5MemWrite})
	host := rp.Host()
	var port record.Port
	var stallNext atomic.Bool
	dev := mlx5.New(mlx5.Config{Name: rec.Name, Mem: host.Mem, MSIX: host.MSIX,
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Subnet: sub, NodeGUID: rec.IB.PortGUID - 1, SequentialQPNs: true, StepClock: true, FrozenTimers: !o.liveTimers,
		Tap: &mlx5.PortTap{
			// The replay hands the device the recorded packets through
			// its own receiver, and takes the packets it sends.
			Receiver: func(rx subnet.Receiver) subnet.Receiver { port = rp.Attach(rx); return rx },
			Send: func(func([]byte) bool) func([]byte) bool {
				send := replaySend(&port)
				return func(pkt []byte) bool {
					if p, err := ib.Parse(pkt); err == nil && p.Transport.BTH.AckReq() && o.stalls > 0 {
						o.stalls--
						stallNext.Store(true)
					}
					return send(pkt)
				}
			},
		}})
	if p := dev.IBPort(); p == nil || p.LID() != rec.IB.LID || p.GUID() != rec.IB.PortGUID {
		dev.Close()
		t.Fatalf("replay of %s: the device's port is not the recorded one (LID %d, GUID %#x)", rec.Name, rec.IB.LID, rec.IB.PortGUID)
	}
	stuck := false
	return rp.Run(dev, func() {
		if !stuck && !settle(dev) {
			stuck = true
			t.Errorf("replay of %s: the device never became idle", rec.Name)
		}
		if stallNext.Swap(false) {
			time.Sleep(o.stall)
		}
	})
}

// replaySend is the replayed device's send: to the replay (the subnet
// never sees the packet).
func replaySend(port *record.Port) func([]byte) bool {
	return func(pkt []byte) bool {
		ok := (*port).Send(pkt)
		fabric.Release(pkt)
		return ok
	}
}

// replaySubnet makes a subnet where the next port to attach gets the
// recorded LID: ports of other GUIDs take the LIDs below it.
func replaySubnet(t *testing.T, p *record.IBPort) *subnet.Subnet {
	t.Helper()
	sub := subnet.New(subnet.Config{GIDPrefix: p.GIDPrefix})
	guid := uint64(0x0200_00ff_fe10_0000)
	for lid := subnet.FirstPortLID; lid < int(p.LID); lid++ {
		for guid == p.PortGUID || guid == subnet.DefaultSMGUID {
			guid++
		}
		if _, err := sub.Attach(fmt.Sprintf("lid%d", lid), guid, func(pkt []byte) bool { fabric.Release(pkt); return true }); err != nil {
			t.Fatalf("replay subnet: %v", err)
		}
		guid++
	}
	return sub
}

// describeIBPacket shows an InfiniBand packet in one line (one with a bad
// CRC too: an altered one).
func describeIBPacket(pkt []byte) string {
	lrh, grh, err := ib.ParseLink(pkt)
	if err != nil || len(pkt) < ib.HeaderLen(grh != nil)+2 {
		return fmt.Sprintf("not an IB packet (%v): % x", err, pkt[:min(len(pkt), 64)])
	}
	s := fmt.Sprintf("lid %d > %d sl %d", lrh.SLID(), lrh.DLID(), lrh.SL())
	if grh != nil {
		s += fmt.Sprintf(" gid %x > %x", grh.SGID(), grh.DGID())
	}
	if _, err := ib.Parse(pkt); err != nil {
		s += fmt.Sprintf(" (%v)", err)
	}
	tp, err := roce.Parse(pkt[ib.HeaderLen(grh != nil) : len(pkt)-2])
	if err != nil {
		return fmt.Sprintf("%s: bad transport packet (%v)", s, err)
	}
	return s + ": " + describeTransport(&tp)
}

// describeMLX5MemWrite shows the device's writes of CQEs and EQEs (63
// bytes, then op_own alone: the ownership bit last; an EQE's type is its
// byte 1) and 4-byte big-endian counters (doorbell records).
func describeMLX5MemWrite(gpa uint64, data []byte) string {
	switch len(data) {
	case uverbs.CQESize64 - 1:
		var b [uverbs.CQESize64]byte
		copy(b[:], data)
		c := uverbs.DecodeCQE(b[:])
		return fmt.Sprintf("CQE qpn %#x wqe_counter %d byte_cnt %d sop %d slid %d src_qpn %#x, or EQE type %#x (% x)",
			c.QPN, c.WQECounter, c.ByteCnt, c.SOpcode, c.SLID, c.SrcQPN, data[1], data)
	case 1:
		return fmt.Sprintf("op_own: opcode %d owner %d", data[0]>>4, data[0]&1)
	case 4:
		return fmt.Sprintf("be32 %d (% x)", uint32(data[0])<<24|uint32(data[1])<<16|uint32(data[2])<<8|uint32(data[3]), data)
	}
	return ""
}

// mlx5Golden is the mlx5 recording TestReplayMLX5CatchesChanges alters.
var mlx5Golden = filepath.Join("testdata", "replay", "mlx5_rc_pingpong", "hca1.rec.gz")

// TestReplayMLX5CatchesChanges checks that the mlx5 replay is strict: a
// recording altered the way another device would have behaved fails with
// a diff naming the event and field.
func TestReplayMLX5CatchesChanges(t *testing.T) {
	tests := []struct {
		name  string
		alter func(rec *record.Recording) bool
		want  []string
	}{{
		name: "register reply",
		alter: func(rec *record.Recording) bool {
			// fw_rev (init segment offset 0) as other firmware answers it.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.RegionRead || ev.Region != 0 || ev.Off != 0 || ev.Len != 4 {
					return false
				}
				ev.Data = []byte{ev.Data[0], ev.Data[1], ev.Data[2], ev.Data[3] + 1}
				return true
			})
		},
		want: []string{`event \d+: region 0 read at 0x0 \(4 bytes\): reply`, `want: `, `got: `},
	}, {
		name: "completion",
		alter: func(rec *record.Recording) bool {
			// A receive CQE of the ping-pong (its 63 bytes before op_own)
			// with another byte count.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.MemWrite || len(ev.Data) != uverbs.CQESize64-1 {
					return false
				}
				var b [uverbs.CQESize64]byte
				copy(b[:], ev.Data)
				if c := uverbs.DecodeCQE(b[:]); c.ByteCnt != 4096 {
					return false
				}
				ev.Data = slices.Clone(ev.Data)
				ev.Data[47]++ // byte_cnt, low byte
				return true
			})
		},
		want: []string{`guest memory write #\d+ at 0x[0-9a-f]+`, `want: CQE qpn .*byte_cnt`, `got: CQE qpn `, `first difference at byte 47`},
	}, {
		name: "packet",
		alter: func(rec *record.Recording) bool {
			// A sent RC packet with another PSN.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.FrameTx {
					return false
				}
				p, err := ib.Parse(ev.Data)
				if err != nil || p.Transport.Opcode().Transport() != roce.TransportRC {
					return false
				}
				p.Transport.BTH[11]++ // PSN, low byte
				return true
			})
		},
		want: []string{`event \d+: sent frame #\d+`, `want: lid \d+ > \d+ .*psn`, `got: lid .*psn`, `first difference at byte`},
	}, {
		name:  "interrupt",
		alter: alterIRQ(16),
		want:  []string{`MSI-X vector 16 raised\n\twant: \d+ times\n\t got: \d+ times`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each a whole replay of the recording (its MR cache fill: about 6,000 commands)
			rec, err := record.ReadFile(mlx5Golden)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.alter(rec) {
				t.Fatalf("the recording has nothing to alter")
			}
			checkDiff(t, replayMLX5(t, rec).Err(), tt.want)
		})
	}
}

// TestReplayMLX5RecordingsAgree checks that the two HCAs' recordings tell
// one story: the packets each sent to the other's LID are what the other
// received, in order (the rest of what they received came from the SA,
// LID 1, or was multicast).
func TestReplayMLX5RecordingsAgree(t *testing.T) {
	dir := filepath.Join("testdata", "replay", "mlx5_rc_pingpong")
	var recs [2]*record.Recording
	for i := range recs {
		rec, err := record.ReadFile(filepath.Join(dir, fmt.Sprintf("hca%d.rec.gz", i)))
		if err != nil {
			t.Fatal(err)
		}
		if rec.IB == nil {
			t.Fatalf("%s: no InfiniBand port in the header", rec.Name)
		}
		recs[i] = rec
	}
	// packets are the unicast packets of a kind from LID src to LID dst.
	packets := func(rec *record.Recording, kind record.Kind, src, dst uint16) [][]byte {
		var out [][]byte
		for _, ev := range rec.Events {
			if ev.Kind != kind || ev.Refused {
				continue
			}
			lrh, _, err := ib.ParseLink(ev.Data)
			if err != nil {
				t.Fatalf("%s: %v", rec.Name, err)
			}
			if lrh.SLID() == src && lrh.DLID() == dst {
				out = append(out, ev.Data)
			}
		}
		return out
	}
	for from := range recs {
		to := 1 - from
		sent := packets(recs[from], record.FrameTx, recs[from].IB.LID, recs[to].IB.LID)
		received := packets(recs[to], record.FrameRx, recs[from].IB.LID, recs[to].IB.LID)
		if len(sent) == 0 || len(sent) != len(received) {
			t.Errorf("%s sent %d packets to LID %d, %s received %d", recs[from].Name, len(sent), recs[to].IB.LID, recs[to].Name, len(received))
			continue
		}
		for k := range sent {
			if !slices.Equal(sent[k], received[k]) {
				t.Errorf("packet #%d: %s sent %s, %s received %s", k+1, recs[from].Name, describeIBPacket(sent[k]), recs[to].Name, describeIBPacket(received[k]))
				break
			}
		}
		var fromSA int
		for _, ev := range recs[to].Events {
			if ev.Kind == record.FrameRx {
				if lrh, _, err := ib.ParseLink(ev.Data); err == nil && lrh.SLID() == subnet.SMLID {
					fromSA++
				}
			}
		}
		t.Logf("%s: %d packets from %s, %d from the SA", recs[to].Name, len(received), recs[from].Name, fromSA)
	}
}

// TestReplayMLX5Stalled stalls the replay after sent RC packets, longer
// than their QP's retransmission timeout (ibv_rc_pingpong's timeout 14:
// 67 ms), before the recorded ACK comes: the replay must not depend on the
// machine's pace. With the timers on the wall clock the device sends the
// packets again (checked too, so that the stall is known to reach a
// timer).
func TestReplayMLX5Stalled(t *testing.T) {
	if testing.Short() {
		t.Skip("stalls for a second")
	}
	rec, err := record.ReadFile(mlx5Golden)
	if err != nil {
		t.Fatal(err)
	}
	o := mlx5ReplayOpts{stalls: 4, stall: 250 * time.Millisecond}
	if err := replayMLX5With(t, rec, o).Err(); err != nil {
		t.Errorf("stalled replay: %v", err)
	}
	o.liveTimers = true
	res := replayMLX5With(t, rec, o)
	if res.RepeatedFrames == 0 {
		t.Errorf("with timers on the wall clock, the stalls made no retransmission: the test stalls nothing that matters")
	}
	t.Logf("with live timers: %d packets sent again, %d differences", res.RepeatedFrames, res.TotalDiffs)
}
