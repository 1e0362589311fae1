package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
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
		dev, err := h.factory(recName(i), h.model, defaultMAC(i))(vfio.Host{})
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

// TestBothModelsOneGuest: with --device pvrdma,mlx5 a guest's two HCAs are
// live side by side under their own names and models (what inspect, trace
// and the metrics list), the ConnectX on the run's subnet, and --record
// writes one recording per HCA: hca0's of the Ethernet segment, hca0-mlx5's
// of the InfiniBand subnet.
func TestBothModelsOneGuest(t *testing.T) {
	dir := t.TempDir()
	h, err := newHCAs(slog.New(slog.NewTextHandler(io.Discard, nil)), "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.model = qemu.ModelPVRDMAMLX5
	if err := h.setupIB("", nil); err != nil {
		t.Fatal(err)
	}
	var devs []vfio.Device
	for _, hca := range guestHCAs(h.model, 0) {
		dev, err := h.factory(hca.name, hca.model, defaultMAC(0))(vfio.Host{})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, dev)
	}
	var live []string
	for _, d := range h.live() {
		live = append(live, d.Name()+" "+d.Model())
	}
	if want := []string{"hca0 pvrdma", "hca0-mlx5 mlx5"}; !slices.Equal(live, want) {
		t.Errorf("live devices %q, want %q", live, want)
	}
	for _, dev := range devs {
		dev.Close()
	}
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	for name, link := range map[string]string{"hca0": "", "hca0-mlx5": record.LinkInfiniBand} {
		rec, err := record.ReadFile(filepath.Join(dir, name+".rec.gz"))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Name != name || rec.Link != link && !(link == "" && rec.Link == record.LinkEthernet) {
			t.Errorf("%s: recording of %q, link %q; want link %q", name, rec.Name, rec.Link, link)
		}
		if link == record.LinkInfiniBand && (rec.IB == nil || rec.IB.LID != 2) {
			t.Errorf("%s: port %+v, want LID 2 on the run's subnet", name, rec.IB)
		}
	}
}
