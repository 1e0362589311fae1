// Package ibtest holds what the tests of the InfiniBand packages (emu/ib,
// emu/ib/mad, emu/ib/subnet) share: a second reading of their packets by
// tshark's InfiniBand dissector. Tests only.
package ibtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric/capture"
)

// Tshark writes pkts (native IB packets, LRH through VCRC) to a pcap in
// link type 252, exported-PDU "infiniband" (shared/spec/mlx5.md §5.9),
// and returns what tshark prints of fields for each, one line a packet,
// the fields separated by sep. It skips the test when tshark is missing.
func Tshark(t testing.TB, pkts [][]byte, sep string, fields ...string) []string {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewPcapWriter(&buf, capture.PcapOptions{Dissector: "infiniband"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pkts {
		if err := w.WritePacket(time.Unix(int64(i), 0), p); err != nil {
			t.Fatal(err)
		}
	}
	return TsharkPcap(t, buf.Bytes(), sep, fields...)
}

// TsharkPcap is Tshark for a pcap file's bytes (a capture's).
func TsharkPcap(t testing.TB, pcap []byte, sep string, fields ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not found in PATH; install it (Debian: apt-get install -y tshark) to run this test")
	}
	p := filepath.Join(t.TempDir(), "ib.pcap")
	if err := os.WriteFile(p, pcap, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", p, "-T", "fields", "-E", "separator=" + sep, "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// Compare fails the test for every line of got that is not want's.
func Compare(t testing.TB, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tshark shows %d packets, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
