package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hcaemu/hcaemu/qemu"
)

const qemuArgsUsage = `usage: hcaemu qemu-args --socket-path PATH [--device pvrdma|mlx5] [--memory M] [--netdev ID] [--slot N] [--mac MAC]

Prints the QEMU arguments that attach an emulated HCA function (served by
"hcaemu serve --device MODEL --socket-path PATH") to your own VM: a vmxnet3
NIC at function 0 of the slot, the HCA at function 1. The arguments are the
same for both models (the server decides what the function is); --device
says which server command to start.
`

// qemuArgsMain implements "hcaemu qemu-args".
func qemuArgsMain(args []string) int {
	return qemuArgsWith(args, os.Stdout, os.Stderr)
}

func qemuArgsWith(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu qemu-args", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket-path", "", "unix socket of the vfio-user server (required)")
	memory := fs.String("memory", "1G", "the VM's RAM size (-m); the memfd backend must match it")
	netdev := fs.String("netdev", "net0", "id of the -netdev the vmxnet3 at function 0 uses")
	slot := fs.Int("slot", 4, "PCI slot for vmxnet3 (function 0) and the PVRDMA function (function 1)")
	mac := fs.String("mac", "", "MAC address of the vmxnet3 (default: QEMU's)")
	device := fs.String("device", string(qemu.ModelPVRDMA), "the device model hcaemu serve emulates: pvrdma or mlx5")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, qemuArgsUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu qemu-args: %v (see hcaemu qemu-args -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hcaemu qemu-args: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *socket == "" {
		fmt.Fprintf(stderr, "hcaemu qemu-args: --socket-path is required\n")
		return 2
	}
	if *slot < 1 || *slot > 31 {
		fmt.Fprintf(stderr, "hcaemu qemu-args: --slot must be 1..31\n")
		return 2
	}
	model, err := deviceModel(*device)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu qemu-args: %v\n", err)
		return 2
	}
	if model == qemu.ModelPVRDMAMLX5 {
		fmt.Fprintf(stderr, "hcaemu qemu-args: --device %s: one function per socket: print each with its own --device and --slot\n", model)
		return 2
	}
	mem, err := qemu.ParseMemory(*memory)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu qemu-args: --memory: %v\n", err)
		return 2
	}
	a := qemu.Args(qemu.DeviceArgs{SocketPath: *socket, MemoryMiB: mem, NetdevID: *netdev, MAC: *mac, Slot: *slot})
	serve, pairing := "hcaemu serve --socket-path "+*socket, `the vmxnet3 must be function 0
# of the PVRDMA function's slot, and its driver must be bound before vmw_pvrdma loads.`
	if model == qemu.ModelMLX5 {
		serve = "hcaemu serve --device mlx5 --socket-path " + *socket
		pairing = `the ConnectX-4 (15b3:1013) is function 1
# of the slot: mlx5_core, mlx5_ib and ib_ipoib bind it; the vmxnet3 is the VM's Ethernet NIC.`
	}
	fmt.Fprintf(stdout, `# QEMU >= 10.1 with vfio-user-pci. Start "%s" first: QEMU never reconnects.
# Guest RAM must be a shared memfd of the same size as -m; %s
# Also give the VM: -netdev <type>,id=%s,...
`, serve, pairing, *netdev)
	var b strings.Builder
	for i := 0; i < len(a); i += 2 {
		fmt.Fprintf(&b, "%s %s \\\n", a[i], shellQuote(a[i+1]))
	}
	fmt.Fprint(stdout, strings.TrimSuffix(b.String(), " \\\n")+"\n")
	return 0
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=,.:/@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
