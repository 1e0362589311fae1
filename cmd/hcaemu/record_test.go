package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/record"
)

// TestRecordMLX5 checks that --record with --device mlx5 writes a
// recording per device whose header names the InfiniBand link and the
// port's identity on the run's subnet (the LIDs the SM gave, in attach
// order; the GUID from the paired NIC's MAC).
func TestRecordMLX5(t *testing.T) {
	dir := t.TempDir()
	h, err := newHCAs(slog.New(slog.NewTextHandler(io.Discard, nil)), "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.model = qemu.ModelMLX5
	var devs []vfio.Device
	for i := range 2 {
		dev, err := h.factory(recName(i), defaultMAC(i))(vfio.Host{})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, dev)
	}
	for _, dev := range devs {
		dev.Close()
	}
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		rec, err := record.ReadFile(filepath.Join(dir, recName(i)+".rec.gz"))
		if err != nil {
			t.Fatal(err)
		}
		want := record.IBPort{LID: uint16(2 + i), PortGUID: mlx5NodeGUID(defaultMAC(i)) + 1, GIDPrefix: 0xfe80000000000000}
		if rec.Link != record.LinkInfiniBand || rec.IB == nil || *rec.IB != want {
			t.Errorf("%s: link %q, port %+v; want %q, %+v", rec.Name, rec.Link, rec.IB, record.LinkInfiniBand, want)
		}
		if n := len(rec.Events); n != 1 || rec.Events[0].Kind != record.Close {
			t.Errorf("%s: events %+v, want the close alone", rec.Name, rec.Events)
		}
	}
}

func recName(i int) string { return fmt.Sprintf("hca%d", i) }
