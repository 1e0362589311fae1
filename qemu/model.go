package qemu

import (
	"fmt"
	"net/netip"
	"strings"
)

// DeviceModel is the emulated HCA a guest's init expects: which driver it
// loads, which RDMA device it waits for and names in HCAEMU_RDMA_DEV.
type DeviceModel string

const (
	// ModelPVRDMA is the VMware paravirtual RDMA adapter (vmw_pvrdma,
	// vmw_pvrdma0, RoCE v2 beside the vmxnet3). The default.
	ModelPVRDMA DeviceModel = "pvrdma"
	// ModelMLX5 is a ConnectX-4 with an InfiniBand port: the guest loads
	// mlx5_core, mlx5_ib and ib_ipoib, waits for mlx5_0 and gives ib0 its
	// IPoIB address (IPoIBNet), HCAEMU_RDMA_DEV=mlx5_0.
	ModelMLX5 DeviceModel = "mlx5"
	// ModelPVRDMAMLX5 gives each guest both HCAs: the PVRDMA function
	// beside its vmxnet3 (vmw_pvrdma0, RoCE v2 on the Ethernet segment)
	// and a ConnectX-4 in a slot of its own (mlx5_0, ib0, on the
	// InfiniBand subnet). The guest loads both drivers; HCAEMU_RDMA_DEV
	// is vmw_pvrdma0, HCAEMU_SERVER_IPOIB is set as for ModelMLX5.
	ModelPVRDMAMLX5 DeviceModel = "pvrdma,mlx5"
)

// ParseDeviceModel checks a device model name ("" is ModelPVRDMA): pvrdma,
// mlx5, or both separated by a comma, in either order (ModelPVRDMAMLX5).
func ParseDeviceModel(s string) (DeviceModel, error) {
	if s == "" {
		return ModelPVRDMA, nil
	}
	var pvrdma, mlx5 bool
	for name := range strings.SplitSeq(s, ",") {
		seen := &pvrdma
		switch DeviceModel(name) {
		case ModelPVRDMA:
		case ModelMLX5:
			seen = &mlx5
		default:
			return "", fmt.Errorf("unknown device model %q (want %s, %s or %s)", name, ModelPVRDMA, ModelMLX5, ModelPVRDMAMLX5)
		}
		if *seen {
			return "", fmt.Errorf("device model %q named twice in %q", name, s)
		}
		*seen = true
	}
	switch {
	case pvrdma && mlx5:
		return ModelPVRDMAMLX5, nil
	case mlx5:
		return ModelMLX5, nil
	}
	return ModelPVRDMA, nil
}

// HasPVRDMA says whether a guest of model m has a PVRDMA function
// (vmw_pvrdma0): pvrdma ("" too) and pvrdma,mlx5.
func (m DeviceModel) HasPVRDMA() bool {
	return m == "" || m == ModelPVRDMA || m == ModelPVRDMAMLX5
}

// HasMLX5 says whether a guest of model m has a ConnectX-4 (mlx5_0, ib0):
// mlx5 and pvrdma,mlx5.
func (m DeviceModel) HasMLX5() bool {
	return m == ModelMLX5 || m == ModelPVRDMAMLX5
}

// IPoIBNet is guest 0's IPoIB address (ib0 of an mlx5 guest) and the prefix
// length, for guests whose Ethernet addresses start at first: the same host
// part in the next subnet of the same size (10.0.0.1/24 -> 10.0.1.1/24), so
// guest k has the address k above it, as on its Ethernet, and the two
// subnets never overlap (rdma_cm resolves an IPoIB address to ib0, an
// Ethernet one to eth0). There is none when first's subnet is the last of
// the address space.
func IPoIBNet(first netip.Prefix) (netip.Prefix, error) {
	if !first.Addr().Is4() || first.Bits() < 1 {
		return netip.Prefix{}, fmt.Errorf("no IPoIB subnet after %s", first.Masked())
	}
	a := first.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	size := uint32(1) << (32 - first.Bits())
	if v+size < v {
		return netip.Prefix{}, fmt.Errorf("no IPoIB subnet after %s: it is the last", first.Masked())
	}
	v += size
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), first.Bits()), nil
}
