package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/qemu"
)

// Device settings of run and serve: --device, --max-qp and --mtu.

// registerDeviceFlag is --device: the model of the emulated HCAs.
func registerDeviceFlag(fs *flag.FlagSet) *string {
	return fs.String("device", string(qemu.ModelPVRDMA), "the emulated HCAs' model: pvrdma (VMware PVRDMA, vmw_pvrdma, RoCE v2 beside the guests' vmxnet3) or mlx5 (ConnectX-4 with an InfiniBand port, mlx5_core and mlx5_ib: being built: RC, UC, UD, XRC and SRQs, IPoIB and rdma_cm work; docs/mlx5.md)"+runOnlyModels)
}

// runOnlyModels is what registerDeviceFlag's help adds for "hcaemu run":
// the spelling of both HCAs in each guest, which serve refuses.
const runOnlyModels = "; run only: pvrdma,mlx5 gives each guest both, the PVRDMA function (hcaK, vmw_pvrdma0) and a ConnectX-4 (hcaK-mlx5, mlx5_0, ib0)"

// deviceModel checks --device's value.
func deviceModel(s string) (qemu.DeviceModel, error) {
	m, err := qemu.ParseDeviceModel(s)
	if err != nil {
		return "", fmt.Errorf("--device: %v", err)
	}
	return m, nil
}

// maxQPLimit is the most QPs a PVRDMA device can advertise: rdma-core's
// vmw_pvrdma provider sizes its QP table from the ucontext response's
// qp_tab_size (the device's max_qp) masked to 16 bits and indexes it by the
// CQE's QP handle, so 65536 would give it a table of none.
const maxQPLimit = 65535

// maxQPFlag is --max-qp: the max_qp the HCAs advertise (and hold).
type maxQPFlag struct{ n uint32 }

func (f *maxQPFlag) String() string {
	if f == nil || f.n == 0 {
		return strconv.Itoa(int(pvrdma.DefaultCaps().MaxQP))
	}
	return strconv.Itoa(int(f.n))
}

func (f *maxQPFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 2 || n > maxQPLimit {
		return fmt.Errorf("not a QP count in 2..%d (2: the GSI QP and one more; %d: what rdma-core's vmw_pvrdma provider can index)", maxQPLimit, maxQPLimit)
	}
	f.n = uint32(n)
	return nil
}

func registerMaxQPFlag(fs *flag.FlagSet) *maxQPFlag {
	f := &maxQPFlag{}
	fs.Var(f, "max-qp", fmt.Sprintf("QPs each HCA holds and advertises (max_qp), 2..%d (default 1024); more QPs leave fewer random bits in a QPN (24 bits in all, the handle's below)", maxQPLimit))
	return f
}

// value is the QP count the flag gives the HCAs: 0 (the default) unless
// it was given.
func (f *maxQPFlag) value() uint32 {
	if f == nil {
		return 0
	}
	return f.n
}

// registerMTUFlag is --mtu: the Ethernet MTU of the segment (the guests'
// vmxnet3s), from which the HCAs' ports take their active MTU.
func registerMTUFlag(fs *flag.FlagSet, what string) *int {
	return fs.Int("mtu", 1500, fmt.Sprintf("Ethernet MTU of the segment, %d..%d: %s; the HCAs' ports take the largest IB MTU that fits (1500: 1024, 9000: 4096)", qemu.MinMTU, qemu.MaxMTU, what))
}

// checkMTU is the one-line complaint about a bad --mtu, or nil.
func checkMTU(mtu int) error {
	if mtu < qemu.MinMTU || mtu > qemu.MaxMTU {
		return fmt.Errorf("--mtu %d: not in %d..%d", mtu, qemu.MinMTU, qemu.MaxMTU)
	}
	return nil
}
