package qemu

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDeviceModel(t *testing.T) {
	for _, tc := range []struct {
		in          string
		want        DeviceModel
		pvrdma, mlx bool // HasPVRDMA, HasMLX5
		err         string
	}{
		{in: "", want: ModelPVRDMA, pvrdma: true},
		{in: "pvrdma", want: ModelPVRDMA, pvrdma: true},
		{in: "mlx5", want: ModelMLX5, mlx: true},
		{in: "pvrdma,mlx5", want: ModelPVRDMAMLX5, pvrdma: true, mlx: true},
		{in: "mlx5,pvrdma", want: ModelPVRDMAMLX5, pvrdma: true, mlx: true},
		{in: "mlx4", err: `unknown device model "mlx4" (want pvrdma, mlx5 or pvrdma,mlx5)`},
		{in: "pvrdma,mlx4", err: `unknown device model "mlx4" (want pvrdma, mlx5 or pvrdma,mlx5)`},
		{in: "pvrdma,", err: `unknown device model "" (want pvrdma, mlx5 or pvrdma,mlx5)`},
		{in: "PVRDMA", err: `unknown device model "PVRDMA"`},
		{in: "pvrdma pvrdma", err: `unknown device model "pvrdma pvrdma"`},
		{in: "mlx5,mlx5", err: `device model "mlx5" named twice in "mlx5,mlx5"`},
		{in: "pvrdma,mlx5,pvrdma", err: `device model "pvrdma" named twice in "pvrdma,mlx5,pvrdma"`},
	} {
		m, err := ParseDeviceModel(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDeviceModel(%q) = %q, %v; want error %q", tc.in, m, err, tc.err)
			}
		case err != nil || m != tc.want:
			t.Errorf("ParseDeviceModel(%q) = %q, %v; want %q", tc.in, m, err, tc.want)
		case m.HasPVRDMA() != tc.pvrdma || m.HasMLX5() != tc.mlx:
			t.Errorf("%q: HasPVRDMA %v, HasMLX5 %v", m, m.HasPVRDMA(), m.HasMLX5())
		}
	}
}

func TestIPoIBNet(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1/24":    "10.0.1.1/24",
		"10.0.0.101/24":  "10.0.1.101/24",
		"192.168.7.9/30": "192.168.7.13/30",
		"10.0.0.1/8":     "11.0.0.1/8",
		"10.0.255.3/24":  "10.1.0.3/24",
	} {
		got, err := IPoIBNet(netip.MustParsePrefix(in))
		if err != nil || got.String() != want {
			t.Errorf("IPoIBNet(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if p, err := IPoIBNet(netip.MustParsePrefix("255.255.255.1/24")); err == nil {
		t.Errorf("the last /24 has an IPoIB subnet after it: %s", p)
	}
}

// An mlx5 guest is told its model, its ib0 address and (guests >= 1)
// guest 0's; a pvrdma guest's command line is as before; a soft-RoCE guest
// has no HCA, whatever the model.
func TestKernelCmdlineModel(t *testing.T) {
	g := guestSpec{index: 1, net: DefaultGuestNet}
	const base = "console=ttyS0 panic=-1 quiet no_timer_check hcaemu.guest=1 hcaemu.ip=10.0.0.2/24 hcaemu.server=10.0.0.1"
	if got := kernelCmdline(g); got != base {
		t.Errorf("pvrdma (default): %q", got)
	}
	g.model = ModelPVRDMA
	if got := kernelCmdline(g); got != base {
		t.Errorf("pvrdma: %q", got)
	}
	g.model, g.ipoib = ModelMLX5, netip.MustParsePrefix("10.0.1.1/24")
	if got, want := kernelCmdline(g), base+" hcaemu.device=mlx5 hcaemu.ipoib=10.0.1.2/24 hcaemu.ipoibserver=10.0.1.1"; got != want {
		t.Errorf("mlx5 guest 1:\n got %q\nwant %q", got, want)
	}
	g.index = 0
	if got, want := kernelCmdline(g), "console=ttyS0 panic=-1 quiet no_timer_check hcaemu.guest=0 hcaemu.ip=10.0.0.1/24 hcaemu.device=mlx5 hcaemu.ipoib=10.0.1.1/24"; got != want {
		t.Errorf("mlx5 guest 0:\n got %q\nwant %q", got, want)
	}
	// Both HCAs: the init is told both models, and ib0's addresses as
	// for mlx5.
	g.model, g.index = ModelPVRDMAMLX5, 1
	if got, want := kernelCmdline(g), base+" hcaemu.device=pvrdma,mlx5 hcaemu.ipoib=10.0.1.2/24 hcaemu.ipoibserver=10.0.1.1"; got != want {
		t.Errorf("pvrdma,mlx5 guest 1:\n got %q\nwant %q", got, want)
	}
	for _, m := range []DeviceModel{ModelMLX5, ModelPVRDMAMLX5} {
		g.model, g.rxe = m, true
		if got := kernelCmdline(g); strings.Contains(got, "hcaemu.device") || strings.Contains(got, "ipoib") {
			t.Errorf("soft-RoCE guest of a %s run: %q", m, got)
		}
	}
}

// order.mlx5: what an mlx5 guest loads after the guest's order, each
// module after its dependencies (the kernel's names, dashes kept).
func TestExtraOrderMLX5(t *testing.T) {
	deps := strings.Join([]string{
		"ib_core module ", "ib_uverbs module ib_core", "vmxnet3 module ", "ib_cm module ib_core", "iw_cm module ib_core",
		"configfs module ", "rdma_cm module iw_cm ib_core ib_cm configfs", "rdma_ucm module ib_core rdma_cm ib_uverbs",
		"ib_umad module ib_core", "crc32_generic module ", "udp_tunnel module ", "ip6_udp_tunnel module ",
		"rdma_rxe module ib_core ib_uverbs udp_tunnel ip6_udp_tunnel", "vmw_pvrdma module ib_core ib_uverbs",
		"9pnet_virtio module 9pnet", "9p module 9pnet netfs", "virtio_console builtin", "9pnet module netfs", "netfs module ",
		"mlx5_core module pci-hyperv-intf mlxfw", "mlx5_ib module mlx5_core ib_uverbs ib_core",
		"pci-hyperv-intf module ", "mlxfw module ", "ib_ipoib module ib_core ib_cm",
	}, "\n")
	order, err := moduleOrder(deps, guestModules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := extraOrder(deps, order, mlx5Modules)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"pci-hyperv-intf", "mlxfw", "mlx5_core", "mlx5_ib", "ib_ipoib"}, got); d != "" {
		t.Errorf("order.mlx5 (-want +got):\n%s", d)
	}
}
