package qemu

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultMemoryMiB is the guest RAM size.
const DefaultMemoryMiB = 1024

// MinMTU and MaxMTU bound the MTU of the guests' vmxnet3s (Cluster.MTU):
// IPv4's least and the most the vmxnet3 driver takes (VMXNET3_MAX_MTU).
const (
	MinMTU = 576
	MaxMTU = 9000
)

// DefaultGuestNet numbers the guests 10.0.0.1/24, 10.0.0.2/24, ...
var DefaultGuestNet = netip.MustParsePrefix("10.0.0.1/24")

// ParseGuestNet parses guest 0's IPv4 address and prefix length
// (ADDR[/LEN], /24 by default) and checks that guests guests numbered from
// it (ADDR, ADDR+1, ...) are hosts of that subnet.
func ParseGuestNet(s string, guests int) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		s += "/24"
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 ADDR[/LEN]", s)
	}
	if p.Bits() > 30 || p.Bits() < 8 {
		return netip.Prefix{}, fmt.Errorf("%s: the prefix length must be 8..30", s)
	}
	network, last := p.Masked().Addr(), lastAddr(p)
	for k := range guests {
		if a := GuestIP(p, k); a == network || a == last || !p.Contains(a) {
			return netip.Prefix{}, fmt.Errorf("%s: guest %d's address %s is not a host of %s", s, k, a, p.Masked())
		}
	}
	return p, nil
}

// lastAddr is a subnet's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// GuestIP is guest k's IPv4 address: guest 0's (first) plus k (k is a
// guest number: small).
func GuestIP(first netip.Prefix, k int) netip.Addr {
	a := first.Addr()
	for range k {
		a = a.Next()
	}
	return a
}

// GuestMAC is the MAC of the vmxnet3 of the guest whose IPv4 address is ip:
// 52:54 and the address (locally administered). Guests with different
// addresses, on this host or another, never share a MAC.
func GuestMAC(ip netip.Addr) [6]byte {
	a := ip.As4()
	return [6]byte{0x52, 0x54, a[0], a[1], a[2], a[3]}
}

// ParseMemory parses a memory size: "1G", "1536M", "2g", or a number of MiB.
func ParseMemory(s string) (int, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(t, "IB")
	t = strings.TrimSuffix(t, "B")
	mult := 1
	switch {
	case strings.HasSuffix(t, "G"):
		mult, t = 1024, strings.TrimSuffix(t, "G")
	case strings.HasSuffix(t, "M"):
		t = strings.TrimSuffix(t, "M")
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad memory size %q (want e.g. 1G or 1536M)", s)
	}
	if n*mult < 128 {
		return 0, fmt.Errorf("memory size %q is too small (at least 128M)", s)
	}
	return n * mult, nil
}

// DeviceArgs describes the PCI slot of an emulated PVRDMA function.
type DeviceArgs struct {
	// SocketPath is the vfio-user server's unix socket.
	SocketPath string
	// MemoryMiB is the VM's RAM size (the memfd backend must match -m).
	MemoryMiB int
	// NetdevID is the -netdev the vmxnet3 at function 0 uses.
	NetdevID string
	// MAC of the vmxnet3 ("" lets QEMU choose).
	MAC string
	// Slot is the PCI slot (device number) holding vmxnet3 (fn 0) and the
	// PVRDMA function (fn 1); 0 means 4.
	Slot int
}

// VFIOUserDevice returns the JSON -device value of a vfio-user-pci function.
// Only the JSON form works for vfio-user-pci; x-no-posted-writes makes every
// BAR write a synchronous round trip, which the driver's probe needs.
func VFIOUserDevice(socketPath string, slot, fn int) string {
	dev := struct {
		Driver string `json:"driver"`
		Socket struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"socket"`
		Addr           string `json:"addr"`
		NoPostedWrites bool   `json:"x-no-posted-writes"`
	}{Driver: "vfio-user-pci", Addr: fmt.Sprintf("0x%x.%d", slot, fn), NoPostedWrites: true}
	dev.Socket.Type = "unix"
	dev.Socket.Path = socketPath
	b, _ := json.Marshal(dev)
	return string(b)
}

// Args returns the QEMU arguments that give a VM an emulated PVRDMA function:
// a memfd-backed shared RAM (the server maps guest memory through the
// DMA_MAP fds), a vmxnet3 at function 0 of the slot (the driver pairs with
// it) and the vfio-user-pci function 1.
func Args(a DeviceArgs) []string {
	mem := a.MemoryMiB
	if mem == 0 {
		mem = DefaultMemoryMiB
	}
	slot := a.Slot
	if slot == 0 {
		slot = 4
	}
	netdev := a.NetdevID
	if netdev == "" {
		netdev = "net0"
	}
	nic := fmt.Sprintf("vmxnet3,netdev=%s,addr=0x%x.0,multifunction=on", netdev, slot)
	if a.MAC != "" {
		nic = fmt.Sprintf("vmxnet3,netdev=%s,mac=%s,addr=0x%x.0,multifunction=on", netdev, a.MAC, slot)
	}
	return []string{
		"-m", fmt.Sprintf("%dM", mem),
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", mem),
		"-machine", "memory-backend=mem",
		"-device", nic,
		"-device", VFIOUserDevice(a.SocketPath, slot, 1),
	}
}

// guestSpec is one guest of a cluster.
type guestSpec struct {
	index     int
	net       netip.Prefix // guest 0's address and the prefix length
	memoryMiB int
	accel     string
	kernel    string
	initrd    string
	netSocket string // the guest's NIC on the segment: a unix stream socket QEMU connects to
	devSocket string // vfio-user socket; "" for none
	// mlx5Socket is the vfio-user socket of a second HCA, the ConnectX
	// of a ModelPVRDMAMLX5 guest, at function 0 of MLX5Slot; "" for none.
	mlx5Socket string
	reboot     bool // a guest reboot restarts the machine instead of ending QEMU
	cpus       int  // vCPUs (0 = 1)
	shares     []guestShare
	image      string // a root file system disk image attached read-only; "" for none
	faults     string // unix socket of the virtio-serial port FaultsPortName; "" for none
	rxe        bool   // soft-RoCE (rxe0 over eth0) instead of an emulated HCA
	mtu        int    // the vmxnet3's MTU (0: the default, 1500)
	// model is the emulated HCA's device model ("" = ModelPVRDMA); an
	// mlx5 guest's ib0 gets the address k above ipoib (guest 0's).
	model DeviceModel
	ipoib netip.Prefix
	// streamPath, when set, joins the NIC to one other guest over a QEMU
	// stream netdev at this unix socket (a measurement's reference, see
	// StreamNetEnv) instead of the segment; streamServer listens there.
	streamPath   string
	streamServer bool
}

// FaultsPortName is the name of the guest's virtio-serial port to the run's
// fault injector (/dev/virtio-ports/FaultsPortName in the guest).
const FaultsPortName = "org.hcaemu.faults"

// faultsSlot is the PCI slot of the virtio-serial controller, clear of the
// HCA's (4) and the shares' (5..).
const faultsSlot = 0x10

// guestShare is a virtio-9p share as QEMU sees it.
type guestShare struct {
	hostDir  string // the directory as QEMU sees it (inside its root)
	guestDir string // the mount point in the guest
}

// shareTag is the 9p mount tag of share i.
func shareTag(i int) string {
	return fmt.Sprintf("hcaemu%d", i)
}

// shareMount is where share i is bound inside the QEMU root.
func shareMount(i int) string {
	return fmt.Sprintf("/run/hcaemu-share%d", i)
}

// imageSlot is the PCI slot of the image's virtio disk (after the shares' and the fault port's).
const imageSlot = 0x11

// MLX5Slot is the PCI slot of the ConnectX function (function 0) of a
// guest with both HCAs (ModelPVRDMAMLX5); its PVRDMA function keeps slot
// 4, function 1, beside the vmxnet3.
const MLX5Slot = 0x12

// kernelCmdline is guest g.index's kernel command line (guest 0's address
// is g.net).
func kernelCmdline(g guestSpec) string {
	k, first := g.index, g.net
	// no_timer_check: under TCG on a loaded host the boot-time check of
	// the IO-APIC timer can miss its ticks and panic the kernel ("IO-APIC
	// + timer doesn't work!"); virtual machines skip it.
	parts := []string{"console=ttyS0", "panic=-1", "quiet", "no_timer_check",
		"hcaemu.guest=" + strconv.Itoa(k), "hcaemu.ip=" + netip.PrefixFrom(GuestIP(first, k), first.Bits()).String()}
	if k > 0 {
		parts = append(parts, "hcaemu.server="+first.Addr().String())
	}
	for i, sh := range g.shares {
		parts = append(parts, "hcaemu.share="+shareTag(i)+":"+sh.guestDir)
	}
	if g.image != "" {
		parts = append(parts, "hcaemu.image=1")
	}
	if g.rxe {
		parts = append(parts, "hcaemu.rxe=1")
	}
	if g.mtu != 0 {
		parts = append(parts, "hcaemu.mtu="+strconv.Itoa(g.mtu))
	}
	// A soft-RoCE guest has no emulated HCA, whatever its model.
	if g.model.HasMLX5() && !g.rxe {
		parts = append(parts, "hcaemu.device="+string(g.model),
			"hcaemu.ipoib="+netip.PrefixFrom(GuestIP(g.ipoib, k), g.ipoib.Bits()).String())
		if k > 0 {
			parts = append(parts, "hcaemu.ipoibserver="+g.ipoib.Addr().String())
		}
	}
	return strings.Join(parts, " ")
}

// qemuArgs is the command line (without the program) of one guest.
func qemuArgs(g guestSpec) []string {
	mem := g.memoryMiB
	if mem == 0 {
		mem = DefaultMemoryMiB
	}
	accel := g.accel
	if accel == "" {
		accel = "tcg"
	}
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	cpus := g.cpus
	if cpus < 1 {
		cpus = 1
	}
	args := []string{
		"-machine", "q35", "-accel", accel, "-cpu", cpu, "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-nographic", "-serial", "stdio", "-no-reboot",
		"-kernel", g.kernel, "-initrd", g.initrd, "-append", kernelCmdline(g),
		// reconnect-ms: QEMU connects again if the connection ends.
		"-netdev", fmt.Sprintf("stream,id=net0,server=off,addr.type=unix,addr.path=%s,reconnect-ms=100", g.netSocket),
	}
	if g.streamPath != "" {
		netdev := fmt.Sprintf("stream,id=net0,server=off,addr.type=unix,addr.path=%s,reconnect-ms=100", g.streamPath)
		if g.streamServer {
			netdev = fmt.Sprintf("stream,id=net0,server=on,addr.type=unix,addr.path=%s", g.streamPath)
		}
		args[len(args)-1] = netdev
	}
	if g.reboot {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "-no-reboot" })
	}
	mac := GuestMAC(GuestIP(g.net, g.index))
	dev := Args(DeviceArgs{SocketPath: g.devSocket, MemoryMiB: mem, NetdevID: "net0", MAC: net.HardwareAddr(mac[:]).String()})
	// No iPXE option ROM: the guests boot with -kernel, and it saves boot time.
	dev[7] = strings.Replace(dev[7], ",addr=", ",romfile=,addr=", 1)
	if g.devSocket == "" {
		dev = dev[:len(dev)-2]
	}
	args = append(args, dev...)
	if g.mlx5Socket != "" {
		args = append(args, "-device", VFIOUserDevice(g.mlx5Socket, MLX5Slot, 0))
	}
	// Shares in the slots after the HCA's (5, 6, ...): read-write, files
	// keep the guest's modes, owned by whoever runs QEMU.
	for i, sh := range g.shares {
		args = append(args,
			"-fsdev", fmt.Sprintf("local,id=fs%d,path=%s,security_model=none", i, qemuOptEscape(sh.hostDir)),
			"-device", fmt.Sprintf("virtio-9p-pci,fsdev=fs%d,mount_tag=%s,addr=0x%x", i, shareTag(i), 5+i))
	}
	if g.faults != "" {
		// QEMU connects to the run's socket, and again within a second
		// if the connection ends.
		args = append(args,
			"-chardev", fmt.Sprintf("socket,id=hcaemufaults,path=%s,reconnect-ms=1000", qemuOptEscape(g.faults)),
			"-device", fmt.Sprintf("virtio-serial-pci,id=hcaemuserial,addr=0x%x", faultsSlot),
			"-device", "virtserialport,bus=hcaemuserial.0,chardev=hcaemufaults,name="+FaultsPortName)
	}
	if g.image != "" {
		// Read-only: guests share the cached image and never write to it.
		args = append(args,
			"-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=image,readonly=on", qemuOptEscape(g.image)),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=image,addr=0x%x", imageSlot))
	}
	return args
}

// qemuOptEscape escapes a value for a QEMU -opt list (commas are doubled).
func qemuOptEscape(s string) string {
	return strings.ReplaceAll(s, ",", ",,")
}
