package main

import (
	"context"
	"fmt"
	"os"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
)

// runFabric joins the HCAs of "hcaemu run"'s guests; runOptions configure it
// before the first device starts.
var (
	runFabric  *hcas
	runOptions = struct {
		pcap     string
		record   string
		logLevel string
		strict   hca.StrictMode
		latch    *strictLatch
		maxQP    *maxQPFlag
		mtu      int
		model    qemu.DeviceModel
	}{logLevel: "warn"}
)

func init() {
	startDevice = startRunDevice
}

// runHCAs returns the run's fabric, made at the first call (after the
// runOptions are set).
func runHCAs() (*hcas, error) {
	if runFabric != nil {
		return runFabric, nil
	}
	log, err := newLogger(runOptions.logLevel)
	if err != nil {
		return nil, err
	}
	h, err := newHCAs(log, runOptions.pcap, runOptions.record, runFaults.quiet(), runFaults.decorators()...)
	if err != nil {
		return nil, err
	}
	h.faults = runFaults.hooks()
	h.strict, h.latch = runOptions.strict, runOptions.latch
	h.maxQP, h.mtu, h.model = runOptions.maxQP.value(), runOptions.mtu, runOptions.model
	if h.model == qemu.ModelMLX5 {
		if err := h.setupIB(runOptions.pcap, runFaults.quiet(), runFaults.ibDecorators()...); err != nil {
			h.close()
			return nil, err
		}
	}
	if runFaults != nil && runFaults.control != nil {
		runFaults.control.SetInspector(h.inspect)
		runFaults.control.SetTracer(h.trace.open)
	}
	runFabric = h
	return h, nil
}

// startRunDevice serves guest k's HCA on socketPath, paired with guest k's
// vmxnet3 (MAC mac).
func startRunDevice(ctx context.Context, socketPath string, guest int, mac [6]byte) (stop func(), err error) {
	if _, err := runHCAs(); err != nil {
		return nil, err
	}
	l, err := vfio.Listen(socketPath)
	if err != nil {
		return nil, err
	}
	return runFabric.serve(ctx, l, fmt.Sprintf("hca%d", guest), mac), nil
}

// closeRunFabric flushes the run's capture.
func closeRunFabric() {
	if runFabric != nil {
		if err := runFabric.close(); err != nil {
			fmt.Fprintf(os.Stderr, "hcaemu run: %v\n", err)
		}
		runFabric = nil
	}
}
