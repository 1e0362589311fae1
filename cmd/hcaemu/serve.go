package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const serveUsage = `usage: hcaemu serve --socket-path PATH [--socket-path PATH2 ...] [--fd N ...] [--pcap FILE] [--record DIR] [--log-level LEVEL]
                    [--faults PLAN] [--faults-log FILE] [--faults-seed N] [--control SOCK [--guest-control SOCK ...]]
                    [--strict warn|off|fail] [--uplink tap:NAME|dev:IFACE] [--max-qp N] [--mtu N]
       hcaemu serve --print-capabilities

Serves one emulated PVRDMA HCA (PCI 15ad:0820) per vfio-user socket, for
QEMU's vfio-user-pci device. The HCAs share one fabric: RoCEv2 traffic
between them stays in this process (and in the --pcap file), or also goes to a
network through --uplink (docs/hosts.md). Start it before QEMU; "hcaemu qemu-args" prints
the QEMU arguments that attach a device.`

func serveMain(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, serveUsage); fs.PrintDefaults() }
	var paths, fds multiFlag
	fs.Var(&paths, "socket-path", "unix socket to listen on (repeatable: one HCA per socket)")
	fs.Var(&fds, "fd", "already listening unix socket fd to serve (repeatable)")
	printCaps := fs.Bool("print-capabilities", false, "print the backend's capabilities as JSON and exit")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pcap := fs.String("pcap", "", "write every RoCEv2 frame between the HCAs to this pcap file (--device mlx5: the InfiniBand subnet's packets to FILE with .ib before its extension, rc.pcap: rc.ib.pcap, link type 252 that tshark decodes)")
	recordDir := fs.String("record", "", "record each HCA's boundary (region accesses, guest memory, MSI-X, frames) into this directory, one file per connection, for replay tests")
	uplink := fs.String("uplink", "", "tap:NAME or dev:IFACE: join the HCAs' segment to a network through a TAP device or an interface (AF_PACKET)")
	faults := registerFaultFlags(fs)
	strict := registerStrictFlag(fs)
	device := registerDeviceFlag(fs)
	maxQP := registerMaxQPFlag(fs)
	mtu := registerMTUFlag(fs, "set the guests' vmxnet3s to the same (ip link set dev eth0 mtu N)")
	metricsAddr := registerMetricsFlag(fs)
	var guestControls multiFlag
	fs.Var(&guestControls, "guest-control", "unix socket a VM's virtio-serial port org.hcaemu.faults connects to, for hcaemu-faults in the guest (repeatable: one per VM; needs --control)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(guestControls) > 0 && faults.control == "" {
		return fatalf("serve: --guest-control needs --control (the guests' commands are those of the control socket)")
	}
	if fs.NArg() > 0 {
		return fatalf("serve: unexpected argument %q", fs.Arg(0))
	}
	if *uplink != "" {
		if _, _, err := fabric.ParseUplink(*uplink); err != nil {
			return fatalf("serve: --uplink: %v", err)
		}
	}
	model, err := deviceModel(*device)
	if err != nil {
		return fatalf("serve: %v", err)
	}
	if model == qemu.ModelPVRDMAMLX5 {
		return fatalf("serve: --device %s: serve emulates one model per process (one HCA per socket); run a second hcaemu serve --device mlx5 for the ConnectX functions", model)
	}
	if err := checkMTU(*mtu); err != nil {
		return fatalf("serve: %v", err)
	}
	if *printCaps {
		json.NewEncoder(os.Stdout).Encode(map[string]any{
			"type":     "vfio-user-pci",
			"device":   "15ad:0820",
			"name":     "VMware PVRDMA (hcaemu)",
			"features": []string{"roce-v2", "msix", "device-reset"},
		})
		return 0
	}
	if len(paths)+len(fds) == 0 {
		return fatalf("serve: give at least one --socket-path or --fd (see hcaemu serve -h)")
	}
	log, err := newLogger(*level)
	if err != nil {
		return fatalf("serve: %v", err)
	}
	metrics, err := listenMetrics(*metricsAddr)
	if err != nil {
		return fatalf("serve: %v", err)
	}
	defer metrics.close()
	var listeners []*net.UnixListener
	for _, p := range paths {
		l, err := vfio.Listen(p)
		if err != nil {
			return fatalf("serve: %v", err)
		}
		listeners = append(listeners, l)
	}
	for _, f := range fds {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return fatalf("serve: --fd %q is not a file descriptor number", f)
		}
		l, err := vfio.FileListener(n)
		if err != nil {
			return fatalf("serve: %v", err)
		}
		listeners = append(listeners, l)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var faultSet *faultSetup
	if faults.enabled() {
		if faultSet, err = faults.start(os.Stderr, ""); err != nil {
			return fatalf("serve: %v", err)
		}
		defer faultSet.close()
		for _, p := range guestControls {
			if err := faultSet.control.ListenGuest(p); err != nil {
				return fatalf("serve: --guest-control: %v", err)
			}
		}
	}
	h, err := newHCAs(log, *pcap, *recordDir, faultSet.quiet(), faultSet.decorators()...)
	if err != nil {
		return fatalf("serve: %v", err)
	}
	h.faults = faultSet.hooks()
	h.strict, h.latch = strict.mode, &strictLatch{stop: cancel}
	h.maxQP, h.mtu, h.model = maxQP.value(), *mtu, model
	if model == qemu.ModelMLX5 {
		if err := h.setupIB(*pcap, faultSet.quiet(), faultSet.ibDecorators()...); err != nil {
			h.close()
			return fatalf("serve: %v", err)
		}
	}
	if *uplink != "" {
		up, err := h.sw.OpenUplink(*uplink)
		if err != nil {
			return fatalf("serve: --uplink: %v", err)
		}
		defer up.Close()
	}
	if faultSet != nil && faultSet.control != nil {
		faultSet.control.SetInspector(h.inspect)
		faultSet.control.SetTracer(h.trace.open)
	}
	metrics.serve(os.Stderr, func() *hcas { return h }, faultSet)
	defer func() {
		if err := h.close(); err != nil {
			fmt.Fprintf(os.Stderr, "hcaemu serve: %v\n", err)
		}
	}()
	var stops []func()
	for i, l := range listeners {
		name := fmt.Sprintf("hca%d", i)
		log.Info("serving", "dev", name, "socket", l.Addr().String())
		stops = append(stops, h.serve(ctx, l, name, model, defaultMAC(i)))
	}
	<-ctx.Done()
	log.Info("shutting down")
	for _, s := range stops {
		s()
	}
	if f, ok := h.latch.finding(); ok {
		fmt.Fprintf(os.Stderr, "hcaemu serve: --strict fail: stopped at the driver's first mistake: %s\n", f)
		return 1
	}
	return 0
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
