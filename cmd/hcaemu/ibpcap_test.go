package main

import (
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/ibtest"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/qemu"
)

func TestIBPcapPath(t *testing.T) {
	for in, want := range map[string]string{
		"rc.pcap":          "rc.ib.pcap",
		"/tmp/x/rc.pcap":   "/tmp/x/rc.ib.pcap",
		"cap":              "cap.ib",
		"/tmp/a.b/cap":     "/tmp/a.b/cap.ib",
		"run.2.pcapng":     "run.2.ib.pcapng",
		".pcap":            ".pcap.ib",
		"/tmp/dir/.hidden": "/tmp/dir/.hidden.ib",
	} {
		if got := ibPcapPath(in); got != want {
			t.Errorf("ibPcapPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIBCapture: with --device mlx5, --pcap PATH captures the subnet in
// PATH's .ib file (link type 252, which tshark decodes as LRH and BTH),
// after the fault plan's subnet decorator; the Ethernet capture stays in
// PATH.
func TestIBCapture(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rc.pcap")
	plan, err := fault.DecodePlan(strings.NewReader(`{"rules":[{"match":{"psn":{"first":2,"last":2},"peer":"lid:3"},"action":{"kind":"drop"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := fault.NewInjector(plan, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	h, err := newHCAs(slog.New(slog.NewTextHandler(io.Discard, nil)), path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.model = qemu.ModelMLX5
	if err := h.setupIB(path, inj.Quiet, inj.SubnetDecorator()); err != nil {
		t.Fatal(err)
	}
	if err := h.setupIB(path, nil); err == nil {
		t.Error("a second subnet was made")
	}
	rx := func(b []byte) bool { fabric.Release(b); return true }
	p0, err := h.ib.Attach("hca0", 0x10, rx)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := h.ib.Attach("hca1", 0x11, rx)
	if err != nil {
		t.Fatal(err)
	}
	for psn := uint32(1); psn <= 3; psn++ {
		f := ib.PacketFields{LRH: ib.LRHFields{SL: 1, DLID: p1.LID(), SLID: p0.LID()},
			Transport: roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, DestQP: 0x12, PSN: psn, PKey: 0xFFFF},
				Payload: make([]byte, 16)}}
		b, err := ib.Build(fabric.NewFrame(), &f)
		if err != nil {
			t.Fatal(err)
		}
		p0.Send(b)
	}
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	eth, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(eth) != 24 || binary.LittleEndian.Uint32(eth[20:]) != 1 {
		t.Errorf("the Ethernet capture %s: %d bytes, want an empty Ethernet pcap", path, len(eth))
	}
	ibp, err := os.ReadFile(filepath.Join(dir, "rc.ib.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if lt := binary.LittleEndian.Uint32(ibp[20:]); lt != 252 {
		t.Errorf("rc.ib.pcap: link type %d, want 252", lt)
	}
	got := ibtest.TsharkPcap(t, ibp, ",", "infiniband.lrh.sl", "infiniband.lrh.dlid", "infiniband.lrh.slid",
		"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
	ibtest.Compare(t, got, []string{"1,3,2,4,0x000012,1", "1,3,2,4,0x000012,3"}) // PSN 2 dropped by the plan
}

// takeAll is a port's taker of batches that releases them.
type takeAll struct{}

func (takeAll) Reserve() bool           { return true }
func (takeAll) Deliver(b *fabric.Batch) { b.Release() }

// TestIBDirectGating: the mlx5 HCAs' subnet carries RC packets in batches
// only when nothing watches it: not with --pcap, not while the fault plan
// has a rule, and always with neither.
func TestIBDirectGating(t *testing.T) {
	ruled, err := fault.DecodePlan(strings.NewReader(`{"rules":[{"match":{"peer":"lid:3"},"action":{"kind":"drop"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		pcap   bool
		plan   *fault.Plan
		direct bool
	}{
		{"bare", false, nil, true},
		{"empty plan", false, &fault.Plan{}, true},
		{"plan with a rule", false, ruled, false},
		{"pcap", true, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := newHCAs(slog.New(slog.NewTextHandler(io.Discard, nil)), "", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer h.close()
			h.model = qemu.ModelMLX5
			pcap := ""
			if c.pcap {
				pcap = filepath.Join(t.TempDir(), "x.pcap")
			}
			var quiet func() bool
			var decorators []subnet.Decorator
			if c.plan != nil {
				inj, err := fault.NewInjector(c.plan, fault.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer inj.Close()
				quiet, decorators = inj.Quiet, []subnet.Decorator{inj.SubnetDecorator()}
			}
			if err := h.setupIB(pcap, quiet, decorators...); err != nil {
				t.Fatal(err)
			}
			rx := func(b []byte) bool { fabric.Release(b); return true }
			p0, _ := h.ib.Attach("hca0", 0x10, rx)
			p1, _ := h.ib.Attach("hca1", 0x11, rx)
			p0.SetDirect(takeAll{})
			p1.SetDirect(takeAll{})
			b, ok := p0.Open(p1.LID())
			if ok != c.direct {
				t.Fatalf("batches allowed: %v, want %v", ok, c.direct)
			}
			if b != nil {
				p0.Flush(b)
			}
		})
	}
}
