package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/hcaemu/hcaemu/emu"
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
		strict   emu.StrictMode
		latch    *strictLatch
	}{logLevel: "warn"}
)

func init() {
	startDevice = startRunDevice
}

// startRunDevice serves guest k's HCA on socketPath, paired with guest k's
// vmxnet3.
func startRunDevice(ctx context.Context, socketPath string, guest int) (stop func(), err error) {
	if runFabric == nil {
		log, err := newLogger(runOptions.logLevel)
		if err != nil {
			return nil, err
		}
		if runFabric, err = newHCAs(log, runOptions.pcap, runOptions.record, runFaults.decorators()...); err != nil {
			return nil, err
		}
		runFabric.faults = runFaults.hooks()
		runFabric.strict, runFabric.latch = runOptions.strict, runOptions.latch
		if runFaults != nil && runFaults.control != nil {
			runFaults.control.SetInspector(runFabric.inspect)
			runFaults.control.SetTracer(runFabric.trace.open)
		}
	}
	hw, err := net.ParseMAC(qemu.GuestMAC(guest))
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("guest %d MAC: %v", guest, err)
	}
	l, err := vfio.Listen(socketPath)
	if err != nil {
		return nil, err
	}
	return runFabric.serve(ctx, l, fmt.Sprintf("hca%d", guest), [6]byte(hw)), nil
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
