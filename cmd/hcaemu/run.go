package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/qemu"
)

// startDevice starts an emulated HCA of a guest (guestHCAs): a vfio-user
// server listening on socketPath (before it returns). stop shuts it down.
// While nil, guests boot without the vfio-user devices.
var startDevice func(ctx context.Context, socketPath string, hca guestHCA, mac [6]byte) (stop func(), err error)

const runUsage = `usage: hcaemu run [--guests N] [--ready started|listen|marker] [--share HOSTDIR[:GUESTDIR]]... [--smp N]
                  [--kernel bzImage] [--modules DIR] [--kernel-tree PATH] [--ulp MODULE,...] [--timeout D] [--memory M] [--cache DIR]
                  [--image debian [--packages PKG,...]] [--pcap FILE] [--record DIR] [--log-level L] [--reboots]
                  [--faults PLAN] [--faults-log FILE] [--faults-seed N] [--control SOCK] [--strict warn|off|fail]
                  [--metrics ADDR] [--rxe K,...|all] [--guest-ip ADDR[/LEN]] [--uplink tap:NAME|dev:IFACE] [--max-qp N] [--mtu N]
                  [--device pvrdma|mlx5|pvrdma,mlx5] -- COMMAND...

Provisions (cached) a QEMU with vfio-user, a guest kernel and initramfs, starts
one emulated PVRDMA device per guest, boots N guests on one Ethernet segment
(guest k is 10.0.0.k+1/24, or k above --guest-ip) and runs COMMAND through the guest shell in each:
guest 0 first, the others once guest 0's command is ready (--ready: by default
once it listens on a TCP port or an rdma_cm ID; or exits 0). When guest 0's
command fails, the others are stopped. In the guests, HCAEMU_GUEST=k and
HCAEMU_SERVER_IP=guest 0's address (empty in guest 0) and HCAEMU_RDMA_DEV is the
guest's RDMA device: vmw_pvrdma0, or rxe0 in the guests --rxe lists, which
use Linux soft-RoCE over their vmxnet3 instead of an emulated HCA (to test
against a second RoCE implementation). Output lines are prefixed [gK].
The exit status is 0 only if every guest's command exited 0.

With --image debian the command runs (bash, normal PATH and HOME) in a Debian
trixie root file system with rdma-core's userland and the --packages, made
once with mmdebstrap and cached by package set; the guests attach it
read-only and keep their writes in RAM.

The HCAs' ports and the guests' NICs share the segment (--pcap captures all
of it), which pauses senders instead of dropping frames, as PFC does.
With --device mlx5 the HCAs' ports are on an InfiniBand subnet instead,
captured next to the --pcap file (rc.pcap: rc.ib.pcap). With --device
pvrdma,mlx5 each guest has both HCAs: the PVRDMA function hcaK
(vmw_pvrdma0, HCAEMU_RDMA_DEV) on the segment and the ConnectX hcaK-mlx5
(mlx5_0, ib0) on the subnet; captures, recordings and fault plans cover
both (a plan's "guest": K is hcaK; the ConnectX is "device": "hcaK-mlx5").
--uplink joins it to a network outside: a TAP device to bridge or route
as you like, or an existing interface; guests of hcaemu on two hosts talk
IP and RoCEv2 through it (give them different --guest-ip addresses).

The frames between the HCAs, and the HCAs themselves, follow a fault plan
(--faults, empty by default) whose control socket (--control, else a path
printed at start) takes live changes: "hcaemu faults --control SOCK ...",
docs/faults.md. Inside the guests, "hcaemu-faults
add|rm|enable|disable|list|stats|clear" does the same through a
virtio-serial port (org.hcaemu.faults).

The HCAs check the guest's driver (--strict): every command, doorbell,
ring index or WQE the device refuses or tolerates is logged as a "driver
mistake" naming the object, the pvrdma_dev_api.h field, its value and what
was allowed; --strict fail stops the run at the first one with exit 1.

A cache that is complete but read-only to you (root's /var/cache/hcaemu)
is used as it is, and what the run writes goes to your own cache
(~/.cache/hcaemu); as a user without root, provisioning uses mmdebstrap's
unshare mode (uidmap and an /etc/subuid range: hcaemu names what is missing).

Environment: HCAEMU_CACHE (cache dir), HCAEMU_ACCEL (tcg|kvm), HCAEMU_MIRROR.
`

// parseGuestList parses "K,..." or "all" into guest numbers below guests.
func parseGuestList(s string, guests int) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	if s == "all" {
		all := make([]int, guests)
		for k := range all {
			all[k] = k
		}
		return all, nil
	}
	var list []int
	for w := range strings.SplitSeq(s, ",") {
		k, err := strconv.Atoi(w)
		if err != nil || k < 0 || k >= guests {
			return nil, fmt.Errorf("%q is not a guest (0..%d) nor all", w, guests-1)
		}
		if !slices.Contains(list, k) {
			list = append(list, k)
		}
	}
	return list, nil
}

// runMain implements "hcaemu run".
func runMain(args []string) int {
	return runWith(context.Background(), args, os.Stdout, os.Stderr)
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	guests := fs.Int("guests", 1, "number of guests (1..8)")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit for boot and command")
	memory := fs.String("memory", "1G", "RAM per guest (e.g. 1G, 1536M)")
	cache := fs.String("cache", "", "cache directory (default $HCAEMU_CACHE, else /var/cache/hcaemu for root, else /var/cache/hcaemu read-only when complete, else ~/.cache/hcaemu: hcaemu cache -h)")
	pcap := fs.String("pcap", "", "write everything on the segment (the guests' IP traffic and RoCE) to this pcap file (--device mlx5 or pvrdma,mlx5: also the InfiniBand subnet's packets to FILE with .ib before its extension, rc.pcap: rc.ib.pcap, link type 252 that tshark decodes)")
	recordDir := fs.String("record", "", "record each HCA's boundary into this directory (hca0.rec.gz, ...) for replay tests")
	logLevel := fs.String("log-level", "warn", "log level of the emulated HCAs (debug, info, warn, error)")
	image := fs.String("image", "", "run the command in a Debian root file system (debian) instead of the u-root initramfs")
	packages := fs.String("packages", "", "PKG,...: Debian packages added to the --image (cached by package set)")
	guestIP := fs.String("guest-ip", qemu.DefaultGuestNet.String(), "ADDR[/LEN]: guest 0's IPv4 address (guest k's is k above it) and prefix length; MACs follow the addresses")
	uplink := fs.String("uplink", "", "tap:NAME or dev:IFACE: join the segment to a network through a TAP device or an interface (AF_PACKET), e.g. to guests of hcaemu on another host")
	rxe := fs.String("rxe", "", "K,... or all: these guests use Linux soft-RoCE (rxe0 over eth0) instead of an emulated HCA")
	reboots := fs.Bool("reboots", false, "let a guest reboot (the command runs again after each boot; $HCAEMU_BOOT counts boots from 1)")
	faults := registerFaultFlags(fs)
	strict := registerStrictFlag(fs)
	device := registerDeviceFlag(fs)
	maxQP := registerMaxQPFlag(fs)
	mtu := registerMTUFlag(fs, "the guests' vmxnet3s (9000: jumbo frames)")
	metricsAddr := registerMetricsFlag(fs)
	var workload workloadFlags
	workload.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu run: %v (see hcaemu run -h)\n", err)
		return 2
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		fmt.Fprintf(stderr, "hcaemu run: no command given: hcaemu run [flags] -- COMMAND...\n")
		return 2
	}
	if *guests < 1 || *guests > 8 {
		fmt.Fprintf(stderr, "hcaemu run: --guests must be between 1 and 8, not %d\n", *guests)
		return 2
	}
	if err := checkMTU(*mtu); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	guestNet, err := qemu.ParseGuestNet(*guestIP, *guests)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: --guest-ip: %v\n", err)
		return 2
	}
	if *uplink != "" {
		if _, _, err := fabric.ParseUplink(*uplink); err != nil {
			fmt.Fprintf(stderr, "hcaemu run: --uplink: %v\n", err)
			return 2
		}
	}
	softRoCE, err := parseGuestList(*rxe, *guests)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: --rxe: %v\n", err)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "hcaemu run: --timeout must be positive\n")
		return 2
	}
	mem, err := qemu.ParseMemory(*memory)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: --memory: %v\n", err)
		return 2
	}
	var pkgs []string
	switch *image {
	case "", qemu.ImageDebian:
	default:
		fmt.Fprintf(stderr, "hcaemu run: --image %q: the one image is %s\n", *image, qemu.ImageDebian)
		return 2
	}
	if *packages != "" {
		if *image == "" {
			fmt.Fprintf(stderr, "hcaemu run: --packages needs --image %s\n", qemu.ImageDebian)
			return 2
		}
		if pkgs, err = qemu.ParsePackages(*packages); err != nil {
			fmt.Fprintf(stderr, "hcaemu run: --packages: %v\n", err)
			return 2
		}
	}
	if *image != "" && workload.customKernel() {
		fmt.Fprintf(stderr, "hcaemu run: --image runs on the provisioned kernel: it cannot be combined with --kernel, --modules or --kernel-tree\n")
		return 2
	}
	if err := workload.apply(nil); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	model, err := deviceModel(*device)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	if _, err := newLogger(*logLevel); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	if err := checkOutputPath("pcap", *pcap); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	metrics, err := listenMetrics(*metricsAddr)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	defer metrics.close() // (closes the listener if it never served)

	if runFaults, err = faults.start(stderr, defaultControlPath()); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}
	defer func() { runFaults.close(); runFaults = nil }()

	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	env, err := qemu.Provision(ctx, qemu.Options{CacheDir: *cache, Log: stderr, Image: *image, Packages: pkgs})
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 1
	}
	cl, err := env.NewCluster(*guests)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 1
	}
	defer cl.Close()
	cl.MemoryMiB, cl.Timeout, cl.Stdout, cl.Stderr = mem, *timeout, stdout, stderr
	cl.AllowReboot = *reboots
	cl.SoftRoCE, cl.Net, cl.Model = softRoCE, guestNet, model
	if *mtu != 1500 {
		cl.MTU = *mtu
	}
	if err := runFaults.listenGuests(cl); err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 1
	}
	if err := workload.apply(cl); err != nil {
		// Only what needs the provisioned kernel is left to fail here.
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 2
	}

	// --strict fail: the first finding stops the guests.
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	latch := &strictLatch{stop: stopRun}
	runOptions.pcap, runOptions.record, runOptions.logLevel = *pcap, *recordDir, *logLevel
	runOptions.strict, runOptions.latch, runOptions.maxQP, runOptions.mtu = strict.mode, latch, maxQP, *mtu
	runOptions.model = model
	defer closeRunFabric()
	if startDevice != nil {
		cl.Devices = true
		for k := 0; k < *guests; k++ {
			if slices.Contains(softRoCE, k) {
				continue
			}
			for _, hca := range guestHCAs(model, k) {
				socket := cl.SocketPath(k)
				if hca.second {
					socket = cl.MLX5SocketPath(k)
				}
				stop, err := startDevice(ctx, socket, hca, cl.GuestMAC(k))
				if err != nil {
					fmt.Fprintf(stderr, "hcaemu run: starting the device %s of guest %d: %v\n", hca.name, k, err)
					return 1
				}
				if stop != nil {
					defer stop()
				}
			}
		}
	}
	if startDevice != nil {
		// One segment: the guests' NICs join the HCAs' switch (and its
		// capture and fault injection), soft-RoCE guests' too.
		h, err := runHCAs()
		if err != nil {
			fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
			return 1
		}
		cl.Switch = h.sw
		if *uplink != "" {
			up, err := h.sw.OpenUplink(*uplink)
			if err != nil {
				fmt.Fprintf(stderr, "hcaemu run: --uplink: %v\n", err)
				return 1
			}
			defer up.Close()
		}
	}
	// Served from now on (the devices exist), shut down before they go.
	metrics.serve(stderr, func() *hcas { return runFabric }, runFaults)
	defer metrics.close()

	results, err := cl.Run(ctx, qemu.CommandScript(cmd))
	if f, ok := latch.finding(); ok {
		fmt.Fprintf(stderr, "hcaemu run: --strict fail: stopped at the driver's first mistake: %s\n", f)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu run: %v\n", err)
		return 1
	}
	status := 0
	for _, r := range results {
		switch {
		case r.Err != nil:
			status = 1
		case r.ExitStatus != 0:
			fmt.Fprintf(stderr, "hcaemu run: guest %d: command exited with status %d\n", r.Guest, r.ExitStatus)
			status = 1
		}
	}
	return status
}
