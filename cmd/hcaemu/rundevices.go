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
	if h.model.HasMLX5() {
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

// startRunDevice serves a guest's HCA hca on socketPath, paired with the
// guest's vmxnet3 (MAC mac).
func startRunDevice(ctx context.Context, socketPath string, hca guestHCA, mac [6]byte) (stop func(), err error) {
	if _, err := runHCAs(); err != nil {
		return nil, err
	}
	l, err := vfio.Listen(socketPath)
	if err != nil {
		return nil, err
	}
	return runFabric.serve(ctx, l, hca.name, hca.model, mac), nil
}

// guestHCA is one emulated HCA of a guest: its name (the device of
// inspect, trace, the metrics, fault plans, recordings) and model.
type guestHCA struct {
	name  string
	model qemu.DeviceModel // ModelPVRDMA or ModelMLX5
	// second: served on the Cluster's MLX5SocketPath, not SocketPath.
	second bool
}

// guestHCAs are the HCAs of guest k in a run of model (--device): hcaK
// for the one of a pvrdma or mlx5 run; with pvrdma,mlx5, hcaK is the
// PVRDMA function and hcaK-mlx5 the ConnectX (the names of one-model runs
// stay as they were).
func guestHCAs(model qemu.DeviceModel, k int) []guestHCA {
	name := fmt.Sprintf("hca%d", k)
	switch model {
	case qemu.ModelMLX5:
		return []guestHCA{{name: name, model: qemu.ModelMLX5}}
	case qemu.ModelPVRDMAMLX5:
		return []guestHCA{{name: name, model: qemu.ModelPVRDMA}, {name: name + "-mlx5", model: qemu.ModelMLX5, second: true}}
	}
	return []guestHCA{{name: name, model: qemu.ModelPVRDMA}}
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
