package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/record"
)

// hcas is the set of emulated HCAs this process serves, joined by one
// fabric. A device is created per vfio-user connection (one QEMU, one PCI
// function) and freed when that connection ends; the next QEMU gets a fresh
// one.
type hcas struct {
	log  *slog.Logger
	sw   *fabric.Switch
	pcap *capture.PcapWriter

	// recordDir, when set, receives one recording per device connection
	// (vfio/record): hca0.rec.gz, then hca0.2.rec.gz for its next
	// connection, and so on.
	recordDir string
	recMu     sync.Mutex
	recs      []*record.Recorder
	recCount  map[string]int

	// faults, when set, gives each HCA its device fault hook (--faults).
	faults func(name string) hca.FaultHook
	// strict is every HCA's strict mode; latch stops the process at the
	// first finding in fail mode.
	strict hca.StrictMode
	latch  *strictLatch
	// maxQP, when set, is the HCAs' max_qp (--max-qp).
	maxQP uint32
	// mtu is the segment's Ethernet MTU (--mtu; 0: 1500).
	mtu int
	// model is the HCAs' device model (--device; "": PVRDMA); with
	// ModelPVRDMAMLX5 each HCA is served as the model serve names.
	model qemu.DeviceModel
	// ib is the InfiniBand subnet of the mlx5 HCAs' ports (made by
	// setupIB, else with the first of them), with its SM and SA; ibPcap
	// captures it (--pcap, in ibPcapPath's file).
	ibOnce sync.Once
	ib     *subnet.Subnet
	ibPcap *capture.PcapWriter

	// devices are the live devices by name (one connection each), of
	// every model, for hcaemu inspect, trace and the metrics.
	devMu   sync.Mutex
	devices map[string]hca.Observed

	// trace hands the devices' trace events to hcaemu trace's clients.
	trace *traceHub
}

// newHCAs makes the fabric; with pcapPath every frame is captured there, with
// recordDir every device's boundary is recorded there. The extra decorators
// (fault injection) come first: the capture records what they let through.
//
// quiet (nil for none) says when the extra decorators look at no frame:
// without a capture, HCAs then send to each other without frames
// (fabric.Batch), frames being built only where something needs them.
func newHCAs(log *slog.Logger, pcapPath, recordDir string, quiet func() bool, extra ...fabric.Decorator) (*hcas, error) {
	h := &hcas{log: log, recordDir: recordDir, recCount: map[string]int{}}
	h.trace = &traceHub{h: h}
	if recordDir != "" {
		if err := os.MkdirAll(recordDir, 0o755); err != nil {
			return nil, fmt.Errorf("--record: %w", err)
		}
	}
	decorators := append([]fabric.Decorator(nil), extra...)
	if pcapPath != "" {
		f, err := os.Create(pcapPath)
		if err != nil {
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		w, err := capture.NewPcapWriter(f, capture.PcapOptions{Nanosecond: true})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		h.pcap = w
		decorators = append(decorators, capture.To(w))
	}
	h.sw = fabric.NewSwitch(decorators...)
	h.sw.SetLogger(log)
	if pcapPath == "" && quiet != nil {
		h.sw.AllowDirect(quiet)
	}
	return h, nil
}

// close flushes the capture and the recordings of devices still open.
func (h *hcas) close() error {
	var errs []error
	h.recMu.Lock()
	for _, rec := range h.recs {
		if err := rec.Save(); err != nil {
			errs = append(errs, fmt.Errorf("--record: %w", err))
		}
	}
	h.recMu.Unlock()
	if h.pcap != nil {
		if err := h.pcap.Close(); err != nil {
			errs = append(errs, fmt.Errorf("--pcap: %w", err))
		}
	}
	if h.ibPcap != nil {
		if err := h.ibPcap.Close(); err != nil {
			errs = append(errs, fmt.Errorf("--pcap (InfiniBand): %w", err))
		}
	}
	return errors.Join(errs...)
}

// ibPcapPath is the file --pcap PATH writes the InfiniBand subnet's
// packets to: PATH with ".ib" before its extension (rc.pcap: rc.ib.pcap;
// without an extension, PATH.ib). A classic pcap has one link type: the
// Ethernet segment stays in PATH, the subnet is link type 252
// (exported-PDU "infiniband", which tshark decodes from the LRH on).
func ibPcapPath(path string) string {
	ext := filepath.Ext(path)
	if ext == "" || ext == filepath.Base(path) {
		return path + ".ib"
	}
	return strings.TrimSuffix(path, ext) + ".ib" + ext
}

// setupIB makes the InfiniBand subnet of the mlx5 HCAs (--device mlx5)
// before the first of them: its packets pass through the decorators
// (fault injection) first, then, with pcapPath, a capture in
// ibPcapPath(pcapPath), which records what the decorators let through.
// quiet (nil for none) says when the decorators look at no packet: without
// a capture, the HCAs then send RC packets to each other in batches.
func (h *hcas) setupIB(pcapPath string, quiet func() bool, decorators ...subnet.Decorator) error {
	decorators = slices.Clone(decorators)
	if pcapPath != "" {
		path := ibPcapPath(pcapPath)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--pcap: InfiniBand capture: %w", err)
		}
		w, err := capture.NewPcapWriter(f, capture.PcapOptions{Nanosecond: true, Dissector: "infiniband"})
		if err != nil {
			f.Close()
			return fmt.Errorf("--pcap: InfiniBand capture %s: %w", path, err)
		}
		h.ibPcap = w
		decorators = append(decorators, subnet.Capture(w))
	}
	made := false
	h.ibOnce.Do(func() { h.ib, made = subnet.New(subnet.Config{}, decorators...), true })
	if !made {
		return errors.New("the InfiniBand subnet exists already")
	}
	if pcapPath == "" && quiet != nil {
		h.ib.AllowDirect(quiet)
	}
	return nil
}

// recorder returns a recorder for a new connection of HCA name, or nil when
// not recording.
func (h *hcas) recorder(name string, mac [6]byte) *record.Recorder {
	if h.recordDir == "" {
		return nil
	}
	h.recMu.Lock()
	defer h.recMu.Unlock()
	h.recCount[name]++
	file := name + ".rec.gz"
	if n := h.recCount[name]; n > 1 {
		file = fmt.Sprintf("%s.%d.rec.gz", name, n)
	}
	rec := record.NewRecorder(filepath.Join(h.recordDir, file), name, net.HardwareAddr(mac[:]).String())
	h.recs = append(h.recs, rec)
	return rec
}

// factory returns the vfio.NewDevice for the HCA called name, of device
// model model (ModelPVRDMA or ModelMLX5), paired with a vmxnet3 whose MAC
// is mac.
func (h *hcas) factory(name string, model qemu.DeviceModel, mac [6]byte) vfio.NewDevice {
	if model == qemu.ModelMLX5 {
		return h.mlx5Factory(name, mac)
	}
	return func(host vfio.Host) (vfio.Device, error) {
		rec := h.recorder(name, mac)
		var hook hca.FaultHook
		if h.faults != nil {
			hook = h.faults(name)
		}
		cfg := pvrdma.Config{Name: name, Mem: host.Mem, MSIX: host.MSIX, MAC: mac, Log: h.log, Faults: hook,
			Attach:    func(rx func([]byte) bool) pvrdma.Port { return h.sw.Attach(name, mac, rx) },
			Strict:    h.strict,
			MaxQP:     h.maxQP,
			MTU:       h.mtu,
			OnFinding: h.onFinding()}
		if rec != nil {
			host = rec.Host(host)
			cfg.Mem, cfg.MSIX = host.Mem, host.MSIX
			cfg.Attach = func(rx func([]byte) bool) pvrdma.Port {
				return rec.Port(h.sw.Attach(name, mac, rec.Receiver(rx)))
			}
			// A recording replays only with the QPNs it was made with:
			// QPN == handle while recording (no random bits to reproduce).
			cfg.SequentialQPNs = true
		}
		d := pvrdma.New(cfg)
		var dev vfio.Device = d
		if rec != nil {
			dev = rec.Device(d)
		}
		return h.goLive(name, d, dev), nil
	}
}

// goLive puts device d (served as dev) in the table of live devices, with
// the tracer if a client traces, until its connection ends.
func (h *hcas) goLive(name string, d hca.Observed, dev vfio.Device) vfio.Device {
	h.devMu.Lock()
	if h.devices == nil {
		h.devices = map[string]hca.Observed{}
	}
	h.devices[name] = d
	h.devMu.Unlock()
	if h.trace.active() { // after the insertion: a client subscribing now sets it too
		d.SetTracer(h.trace)
	}
	return &liveDevice{Device: dev, h: h, name: name, dev: d}
}

// mlx5Factory returns the vfio.NewDevice of an emulated ConnectX (--device
// mlx5), its port on the run's InfiniBand subnet (setupIB's, with the
// fault decorator and the capture; a bare one when setupIB was not
// called), with its device fault hook (--faults), in the table of live
// devices as a PVRDMA device is (inspect, trace, metrics).
func (h *hcas) mlx5Factory(name string, mac [6]byte) vfio.NewDevice {
	h.ibOnce.Do(func() { h.ib = subnet.New(subnet.Config{}) })
	return func(host vfio.Host) (vfio.Device, error) {
		rec := h.recorder(name, mac)
		if rec != nil {
			host = rec.Host(host)
		}
		var hook hca.FaultHook
		if h.faults != nil {
			hook = h.faults(name)
		}
		cfg := mlx5.Config{Name: name, Mem: host.Mem, MSIX: host.MSIX, Log: h.log, Faults: hook,
			Subnet: h.ib, NodeGUID: mlx5NodeGUID(mac), Strict: h.strict, OnFinding: h.onFinding()}
		if rec != nil {
			// The port's packets both ways, the SA's answers included;
			// QPN == handle, as for PVRDMA.
			cfg.Tap = &mlx5.PortTap{Send: rec.Sender,
				Receiver: func(rx subnet.Receiver) subnet.Receiver { return subnet.Receiver(rec.Receiver(rx)) }}
			cfg.SequentialQPNs, cfg.StepClock = true, true
		}
		d := mlx5.New(cfg)
		var dev vfio.Device = d
		if rec != nil {
			if p := d.IBPort(); p != nil {
				rec.SetInfiniBand(record.IBPort{LID: p.LID(), PortGUID: p.GUID(), GIDPrefix: p.Subnet().GIDPrefix()})
			}
			dev = rec.Device(dev)
		}
		return h.goLive(name, d, dev), nil
	}
}

// mlx5NodeGUID is the node GUID of the ConnectX paired with the NIC of MAC
// mac: Mellanox's OUI, the MAC's last three bytes, and a zero byte below
// them so that the port's GUID (the node's + 1) is no other node's.
func mlx5NodeGUID(mac [6]byte) uint64 {
	return 0x0002c90300000000 | uint64(mac[3])<<24 | uint64(mac[4])<<16 | uint64(mac[5])<<8
}

// liveDevice is a device in the hcas' table of live devices (for
// inspection) until its connection ends.
type liveDevice struct {
	vfio.Device
	h    *hcas
	name string
	dev  hca.Observed
}

func (l *liveDevice) Close() {
	l.Device.Close()
	l.h.devMu.Lock()
	if l.h.devices[l.name] == l.dev {
		delete(l.h.devices, l.name)
	}
	l.h.devMu.Unlock()
}

// live returns the live devices, by name.
func (h *hcas) live() []hca.Observed {
	h.devMu.Lock()
	defer h.devMu.Unlock()
	names := make([]string, 0, len(h.devices))
	for name := range h.devices {
		names = append(names, name)
	}
	slices.Sort(names)
	devs := make([]hca.Observed, 0, len(names))
	for _, name := range names {
		devs = append(devs, h.devices[name])
	}
	return devs
}

// onFinding is the devices' OnFinding: the latch's, if any.
func (h *hcas) onFinding() func(hca.Finding) {
	if h.latch == nil {
		return nil
	}
	return h.latch.report
}

// serve serves HCA name, of device model model (ModelPVRDMA or
// ModelMLX5), on l until ctx ends or stop is called.
func (h *hcas) serve(ctx context.Context, l *net.UnixListener, name string, model qemu.DeviceModel, mac [6]byte) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	srv := &vfio.Server{NewDevice: h.factory(name, model, mac), Log: h.log.With("dev", name)}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ctx, l); err != nil && ctx.Err() == nil {
			h.log.Error("vfio-user server stopped", "dev", name, "err", err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// defaultMAC is the MAC hcaemu assumes for the vmxnet3 paired with HCA i
// when none is given (it only seeds the node GUID).
func defaultMAC(i int) [6]byte {
	return [6]byte{0x00, 0x50, 0x56, 0xca, byte(i >> 8), byte(i)}
}

func fatalf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "hcaemu: "+format+"\n", args...)
	return 2
}
