// Command hcaemu emulates a VMware paravirtual RDMA adapter (PVRDMA, PCI
// 15ad:0820) for QEMU's vfio-user-pci device, so that guests running the
// unmodified vmw_pvrdma driver and rdma-core use RDMA with no RDMA hardware.
//
//	hcaemu serve --socket-path PATH [...]   serve HCAs to a QEMU you start
//	hcaemu qemu-args --socket-path PATH     print the QEMU arguments
//	hcaemu run [--guests N] -- COMMAND      provision, boot guests, run COMMAND
//	hcaemu cache [clean]                    show (or remove) the cache
//	hcaemu version [--json]                 versions of hcaemu and of the cache's QEMU, kernel, rdma-core
package main

import (
	"fmt"
	"os"
)

const usage = `usage: hcaemu <command> [arguments]

commands:
  serve       serve emulated PVRDMA HCAs on vfio-user sockets
  qemu-args   print the QEMU arguments that attach an HCA to your own VM
  run         provision QEMU and guests, boot them with HCAs, run a command in each
  faults      control a running fault plan; turn a fault log into a plan
  inspect     show what the HCAs of a running run or serve hold
  trace       stream what the HCAs of a running run or serve do, per QP
  cache       where the cache is, how big, what it holds; "cache clean" removes yours
  version     this hcaemu's version and the cache's QEMU, guest kernel, rdma-core (--json)

"hcaemu <command> -h" describes a command's flags.`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serveMain(os.Args[2:]))
	case "run":
		os.Exit(runMain(os.Args[2:]))
	case "qemu-args":
		os.Exit(qemuArgsMain(os.Args[2:]))
	case "faults":
		os.Exit(faultsMain(os.Args[2:], os.Stdout, os.Stderr))
	case "inspect":
		os.Exit(inspectMain(os.Args[2:], os.Stdout, os.Stderr))
	case "trace":
		os.Exit(traceMain(os.Args[2:], os.Stdout, os.Stderr))
	case "cache":
		os.Exit(cacheMain(os.Args[2:], os.Stdout, os.Stderr))
	case "version", "--version":
		os.Exit(versionMain(os.Args[2:], os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "hcaemu: unknown command %q\n%s\n", os.Args[1], usage)
		os.Exit(2)
	}
}
