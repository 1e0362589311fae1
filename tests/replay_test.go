package tests

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
	"github.com/hcaemu/hcaemu/vfio/record"
)

// Record/replay golden tests (the crypto/tls habit): testdata/replay/NAME/
// holds, per emulated HCA, everything that crossed its boundary while real
// guests ran a scenario (hcaemu run --record). TestReplay feeds each
// recording into a fresh device with no QEMU and compares every register
// reply, guest memory write, interrupt and frame (an InfiniBand packet for
// the mlx5 scenarios: replay_mlx5_test.go) with the recording; a change
// that alters what the driver sees fails it with a readable diff.
//
//	go test ./tests -run Replay -update    # re-record from real guests
//
// -update boots guests (provisioning as for the end-to-end tests).

var update = flag.Bool("update", false, "re-record the replay goldens from real guests (boots QEMU)")

// replayScenarios are the recorded scenarios: a name (the directory under
// testdata/replay), the guests and the command line they run.
var replayScenarios = []struct {
	name   string
	guests int
	// model is the device model (hcaemu run --device; "": PVRDMA).
	model  string
	script string
	// want is what guest 0's and guest 1's output must show for a good
	// recording.
	want []string
}{{
	// Driver probe (the recording starts at the vfio-user connection: the
	// firmware's and the driver's config space and BAR accesses, the DSR,
	// the command channel) and an RC ping-pong between two guests. 100
	// iterations of 4096 bytes keep the recording small.
	name:   "rc_pingpong",
	guests: 2,
	script: guestRetry + "run ibv_rc_pingpong -g 1 -c -n 100\nexit $failed\n",
	want:   []string{`RESULT 0 ibv_rc_pingpong`, `100 iters in`},
}, {
	// The emulated ConnectX-4 (--device mlx5): mlx5_core's probe and
	// mlx5_ib's (the command queue, polling then event mode, MAD_IFC),
	// ib_ipoib bringing ib0 up (its SA queries and joins: the SA's
	// answers are received packets of the recording), then an RC
	// ping-pong between the two HCAs by LID (replay_mlx5_test.go).
	name:   "mlx5_rc_pingpong",
	guests: 2,
	model:  "mlx5",
	script: guestRetry + "run ibv_rc_pingpong -d mlx5_0 -n 100\nexit $failed\n",
	want:   []string{`RESULT 0 ibv_rc_pingpong -d mlx5_0 -n 100`, `100 iters in`, `remote address: LID 0x000[2-9]`},
}}

func TestReplay(t *testing.T) {
	for _, sc := range replayScenarios {
		t.Run(sc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "replay", sc.name)
			if *update {
				var args []string
				if sc.model != "" {
					args = []string{"--device", sc.model}
				}
				recordScenario(t, dir, sc.guests, sc.script, sc.want, args...)
			}
			files, err := filepath.Glob(filepath.Join(dir, "*.rec.gz"))
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != sc.guests {
				t.Fatalf("%s: %d recordings, want one per guest (%d); run go test ./tests -run Replay -update", dir, len(files), sc.guests)
			}
			for _, file := range files {
				t.Run(strings.TrimSuffix(filepath.Base(file), ".rec.gz"), func(t *testing.T) {
					rec, err := record.ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					var res *record.Result
					if sc.model == "mlx5" {
						res = replayMLX5(t, rec)
					} else {
						res = replay(t, rec, nil)
					}
					t.Logf("%s: %d inputs, %d guest memory reads (%d beyond the recording's), %d writes, %d interrupts, %d frames sent",
						file, res.Inputs, res.Reads, res.ExtraReads, res.Writes, res.IRQs, res.Frames)
					if err := res.Err(); err != nil {
						t.Errorf("%v\n(if the device is meant to behave differently now, record again: go test ./tests -run Replay -update)", err)
					}
				})
			}
		})
	}
}

// TestReplayCatchesChanges checks that the replay is strict: a device that
// behaves differently from the recording (a device with other capabilities,
// or the recording altered the way a different device would have answered)
// fails with a diff that names the event and field.
func TestReplayCatchesChanges(t *testing.T) {
	file := filepath.Join("testdata", "replay", "rc_pingpong", "hca1.rec.gz")
	tests := []struct {
		name string
		// alter changes the recording; it reports whether it found what
		// it alters.
		alter func(rec *record.Recording) bool
		// caps, if not nil, changes the replayed device's capabilities.
		caps func(caps *abi.DeviceCaps)
		want []string // regexps the diff must match
	}{{
		name: "device capabilities",
		caps: func(caps *abi.DeviceCaps) { caps.MaxQPWR-- },
		want: []string{`event \d+: guest memory write #1 at 0x[0-9a-f]+\n\twant: .*\n\t got: .*first difference at byte \d+`},
	}, {
		name: "register reply",
		alter: func(rec *record.Recording) bool {
			// The driver's read of the version register (BAR1 offset 0)
			// as a device with another version would answer it.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.RegionRead || ev.Region != 1 || ev.Off != 0 || ev.Len != 4 {
					return false
				}
				ev.Data = []byte{ev.Data[0] + 1, ev.Data[1], ev.Data[2], ev.Data[3]}
				return true
			})
		},
		want: []string{`event \d+: region 1 read at 0x0 \(4 bytes\): reply`, `want: `, `got: `},
	}, {
		name: "completion",
		alter: func(rec *record.Recording) bool {
			// A CQE with another status than the device writes.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.MemWrite || len(ev.Data) != uverbs.CQESize {
					return false
				}
				cqe := uverbs.DecodeCQE(ev.Data)
				if cqe.Opcode != 0 { // the first completion of a send
					return false
				}
				cqe.Status = 5 // WR_FLUSH_ERR
				b := make([]byte, uverbs.CQESize)
				cqe.Encode(b)
				ev.Data = b
				return true
			})
		},
		want: []string{`guest memory write #\d+ at 0x[0-9a-f]+`, `want: CQE .*status 5`, `got: CQE .*status 0`},
	}, {
		name: "frame",
		alter: func(rec *record.Recording) bool {
			// A sent packet with another PSN.
			return alterFirst(rec, func(ev *record.Event) bool {
				if ev.Kind != record.FrameTx {
					return false
				}
				u, err := roce.Unframe(ev.Data)
				if err != nil {
					return false
				}
				pkt, err := roce.Parse(u.IB)
				if err != nil {
					return false
				}
				pkt.BTH[11]++ // PSN, low byte
				return true
			})
		},
		want: []string{`event \d+: sent frame #1`, `want: .*psn`, `got: .*psn`, `first difference at byte`},
	}, {
		name:  "interrupt",
		alter: alterIRQ(31),
		want:  []string{`MSI-X vector 31 raised\n\twant: 1 times\n\t got: 0 times`},
	}, {
		name: "guest memory the device no longer reads",
		alter: func(rec *record.Recording) bool {
			// An extra recorded read: the replay does one read fewer
			// than the recording.
			for i, ev := range rec.Events {
				if ev.Kind == record.MemRead && ev.Len == 4 {
					rec.Events = slices.Insert(rec.Events, i, ev)
					return true
				}
			}
			return false
		},
		want: []string{`guest memory read of \[0x[0-9a-f]+, \+4\)\n\twant: \d+ reads\n\t got: \d+ reads`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := record.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if tt.alter != nil && !tt.alter(rec) {
				t.Fatalf("the recording has nothing to alter")
			}
			var caps *abi.DeviceCaps
			if tt.caps != nil {
				c := pvrdma.DefaultCaps()
				tt.caps(&c)
				caps = &c
			}
			checkDiff(t, replay(t, rec, caps).Err(), tt.want)
		})
	}
}

// checkDiff checks that the replay of an altered recording failed with a
// diff matching the regexps want.
func checkDiff(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("replay of an altered recording passed")
	}
	t.Logf("the diff:\n%v", err)
	for _, w := range want {
		if !regexp.MustCompile(w).MatchString(err.Error()) {
			t.Errorf("diff lacks %q:\n%v", w, err)
		}
	}
}

// alterIRQ makes the first interrupt of a recording one of vector v.
func alterIRQ(v int) func(rec *record.Recording) bool {
	return func(rec *record.Recording) bool {
		return alterFirst(rec, func(ev *record.Event) bool {
			if ev.Kind != record.IRQ {
				return false
			}
			ev.Vector = v
			return true
		})
	}
}

// alterFirst applies f to the events until it returns true.
func alterFirst(rec *record.Recording, f func(ev *record.Event) bool) bool {
	for i := range rec.Events {
		if f(&rec.Events[i]) {
			return true
		}
	}
	return false
}

// replayAttempts bounds how often a replay is run again because an RC
// retransmission timer fired in it (see replay).
const replayAttempts = 3

// replay feeds rec into a fresh device (with caps, if not nil) and returns
// the comparison.
//
// The device's RC retransmission timer is real time (ibv_rc_pingpong asks
// for 4.096 µs × 2^14 ≈ 67 ms): on a loaded machine a replay may stall that
// long between a packet and the recorded ACK, and the device retransmits.
// The recordings have no retransmission (recordScenario makes sure), so a
// replay that repeats a sent frame, or differs otherwise, is run again, up
// to replayAttempts times (each attempt logged); a device that retransmits
// or differs every time fails with the diff.
func replay(t *testing.T, rec *record.Recording, caps *abi.DeviceCaps) *record.Result {
	t.Helper()
	var res *record.Result
	for attempt := 1; attempt <= replayAttempts; attempt++ {
		res = replayOnce(t, rec, caps)
		if res.RepeatedFrames > rec.RepeatedFrames() {
			t.Logf("replay of %s, attempt %d: %d frames sent again (a retransmission timer fired: the machine was slow)",
				rec.Name, attempt, res.RepeatedFrames)
			continue
		}
		if res.TotalDiffs == 0 {
			break
		}
		// Seen once in ten runs under -race and two CPU hogs: an ACK sent
		// after the requester's next SEND instead of before it (the
		// responder's and the requester's work reordered on a stalled
		// engine). A change of behaviour differs on every attempt.
		t.Logf("replay of %s, attempt %d: %d differences, run again", rec.Name, attempt, res.TotalDiffs)
	}
	return res
}

func replayOnce(t *testing.T, rec *record.Recording, caps *abi.DeviceCaps) *record.Result {
	t.Helper()
	checkNoGoroutineLeak(t)
	var mac [6]byte
	if rec.MAC != "" {
		hw, err := net.ParseMAC(rec.MAC)
		if err != nil || len(hw) != 6 {
			t.Fatalf("recording %s: MAC %q: %v", rec.Name, rec.MAC, err)
		}
		mac = [6]byte(hw)
	}
	rp := record.NewReplay(rec, record.Options{Frame: describeFrame, MemWrite: describeMemWrite})
	host := rp.Host()
	// Recordings are made with QPN == handle (hcaemu run --record), so the
	// replay's QPNs are the recorded ones.
	dev := pvrdma.New(pvrdma.Config{Name: rec.Name, Mem: host.Mem, MSIX: host.MSIX, MAC: mac, Caps: caps,
		Log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Attach:         func(rx func([]byte) bool) pvrdma.Port { return rp.Attach(rx) },
		SequentialQPNs: true})
	stuck := false
	res := rp.Run(dev, func() {
		if !stuck && !settle(dev) {
			stuck = true
			t.Errorf("replay of %s: the device never became idle", rec.Name)
		}
	})
	return res
}

// settle waits until dev has done all the work queued so far, received
// frames included. dev.Sync alone does not wait for frames: the engine may
// take the barrier's wake-up before a queued frame, and may take a frame
// right after closing the barrier; so Sync until Idle (nothing queued), then
// Sync once more (a frame the engine took meanwhile is done before that
// barrier is closed, with the work it queued). It reports false if the
// device kept finding work.
func settle(dev interface {
	Sync()
	Idle() bool
}) bool {
	for range 10000 {
		dev.Sync()
		if dev.Idle() {
			dev.Sync()
			if dev.Idle() {
				return true
			}
		}
		runtime.Gosched()
	}
	return false
}

// describeFrame shows a RoCEv2 frame in one line.
func describeFrame(frame []byte) string {
	u, err := roce.Unframe(frame)
	if err != nil {
		return fmt.Sprintf("not RoCEv2 (%v): % x", err, frame[:min(len(frame), 64)])
	}
	pkt, err := roce.Parse(u.IB)
	if err != nil {
		return fmt.Sprintf("%v > %v sport %d: bad transport packet (%v)", u.SrcIP, u.DstIP, u.SrcPort, err)
	}
	return fmt.Sprintf("%v > %v sport %d: %s", u.SrcIP, u.DstIP, u.SrcPort, describeTransport(&pkt))
}

// describeTransport shows a transport packet (BTH onward) in one line.
func describeTransport(pkt *roce.Packet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v dqpn %#x psn %d", pkt.Opcode(), pkt.BTH.DestQP(), pkt.BTH.PSN())
	if pkt.BTH.AckReq() {
		b.WriteString(" ackreq")
	}
	if pkt.AETH != nil {
		fmt.Fprintf(&b, " aeth %v msn %d", pkt.AETH.Syndrome(), pkt.AETH.MSN())
	}
	if pkt.RETH != nil {
		fmt.Fprintf(&b, " reth %+v", pkt.RETH.Fields())
	}
	if pkt.DETH != nil {
		fmt.Fprintf(&b, " deth %+v", pkt.DETH.Fields())
	}
	fmt.Fprintf(&b, ", %d bytes payload, icrc %#08x", len(pkt.Payload), pkt.ICRCValue())
	return b.String()
}

// describeMemWrite shows a 64-byte write as the CQE it is in the rings of
// this device (command responses are 64 bytes too, but the CQE fields of
// those are still readable) and a 4-byte one as a ring index.
func describeMemWrite(gpa uint64, data []byte) string {
	switch len(data) {
	case uverbs.CQESize:
		c := uverbs.DecodeCQE(data)
		return fmt.Sprintf("CQE wr_id %#x qp %#x opcode %d status %d byte_len %d src_qp %#x wc_flags %#x (% x)",
			c.WRID, c.QP, c.Opcode, c.Status, c.ByteLen, c.SrcQP, c.WCFlags, data)
	case 4:
		return fmt.Sprintf("u32 %d (% x)", uint32(data[0])|uint32(data[1])<<8|uint32(data[2])<<16|uint32(data[3])<<24, data)
	}
	return ""
}

// checkNoGoroutineLeak fails the test if it leaves goroutines behind (the
// device's engine and timers must be gone once it is closed).
func checkNoGoroutineLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// recordScenario records script in real guests into dir, replacing what is
// there. A recording in which a frame was retransmitted (a timer fired) or
// refused (a full queue) is made again: those depend on the machine's load,
// not on the device's behaviour.
func recordScenario(t *testing.T, dir string, guests int, script string, want []string, args ...string) {
	t.Helper()
	needE2E(t)
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		tmp := t.TempDir()
		out, code := hcaemuRun(t, append(args, "--guests", fmt.Sprint(guests), "--timeout", "8m", "--record", tmp, "--", script)...)
		if code != 0 {
			t.Fatalf("hcaemu run: exit %d", code)
		}
		for k := range guests {
			mustContain(t, out, k, want...)
		}
		if t.Failed() {
			t.FailNow()
		}
		files, err := filepath.Glob(filepath.Join(tmp, "*.rec.gz"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != guests {
			t.Fatalf("%d recordings, want %d (one connection per guest): %v", len(files), guests, files)
		}
		why := ""
		for _, f := range files {
			rec, err := record.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if w := unsteady(rec); w != "" {
				why += fmt.Sprintf("%s: %s; ", filepath.Base(f), w)
			}
		}
		if why != "" {
			t.Logf("attempt %d: recording depends on timing (%s), recording again", attempt, why)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("recorded %s (%d bytes)", filepath.Join(dir, filepath.Base(f)), len(b))
		}
		return
	}
	t.Fatalf("no steady recording in %d attempts", attempts)
}

// unsteady says why a recording depends on the machine's timing, or "".
func unsteady(rec *record.Recording) string {
	if n := rec.RepeatedFrames(); n > 0 {
		return fmt.Sprintf("%d frames sent again (retransmissions)", n)
	}
	for i, ev := range rec.Events {
		switch {
		case ev.Kind == record.FrameTx && ev.Refused:
			return fmt.Sprintf("event %d: frame refused by a full queue", i)
		case ev.Kind == record.FrameRx && ev.Refused:
			return fmt.Sprintf("event %d: received frame dropped (queue full)", i)
		}
	}
	return ""
}

// TestReplayRecordingsAgree checks that the two HCAs' recordings tell one
// story: what each sent is what the other received, in order (the fabric
// joins just these two).
func TestReplayRecordingsAgree(t *testing.T) {
	dir := filepath.Join("testdata", "replay", "rc_pingpong")
	frames := func(rec *record.Recording, kind record.Kind) [][]byte {
		var out [][]byte
		for _, ev := range rec.Events {
			if ev.Kind == kind && !ev.Refused {
				out = append(out, ev.Data)
			}
		}
		return out
	}
	var recs [2]*record.Recording
	for i := range recs {
		rec, err := record.ReadFile(filepath.Join(dir, fmt.Sprintf("hca%d.rec.gz", i)))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	for from := range recs {
		to := 1 - from
		sent, received := frames(recs[from], record.FrameTx), frames(recs[to], record.FrameRx)
		if len(sent) == 0 || len(sent) != len(received) {
			t.Errorf("%s sent %d frames, %s received %d", recs[from].Name, len(sent), recs[to].Name, len(received))
			continue
		}
		for k := range sent {
			if !slices.Equal(sent[k], received[k]) {
				t.Errorf("frame #%d: %s sent %s, %s received %s", k+1, recs[from].Name, describeFrame(sent[k]), recs[to].Name, describeFrame(received[k]))
				break
			}
		}
	}
}
