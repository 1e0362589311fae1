package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/hcaemu/hcaemu/emu"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/vfio"
)

// hcas is the set of emulated HCAs this process serves, joined by one
// fabric. A device is created per vfio-user connection (one QEMU, one PCI
// function) and freed when that connection ends; the next QEMU gets a fresh
// one.
type hcas struct {
	log  *slog.Logger
	sw   *fabric.Switch
	pcap *capture.PcapWriter
}

// newHCAs makes the fabric; with pcapPath every frame is captured there.
func newHCAs(log *slog.Logger, pcapPath string) (*hcas, error) {
	h := &hcas{log: log}
	var decorators []fabric.Decorator
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
	return h, nil
}

// close flushes the capture.
func (h *hcas) close() error {
	if h.pcap != nil {
		return h.pcap.Close()
	}
	return nil
}

// factory returns the vfio.NewDevice for the HCA called name, paired with a
// vmxnet3 whose MAC is mac.
func (h *hcas) factory(name string, mac [6]byte) vfio.NewDevice {
	return func(host vfio.Host) (vfio.Device, error) {
		d := emu.New(emu.Config{Name: name, Mem: host.Mem, MSIX: host.MSIX, MAC: mac, Log: h.log,
			Attach: func(rx func([]byte) bool) emu.Port { return h.sw.Attach(name, mac, rx) }})
		return d, nil
	}
}

// serve serves HCA name on l until ctx ends or stop is called.
func (h *hcas) serve(ctx context.Context, l *net.UnixListener, name string, mac [6]byte) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	srv := &vfio.Server{NewDevice: h.factory(name, mac), Log: h.log.With("dev", name)}
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
