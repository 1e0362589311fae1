package tests

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// allowedImports is the project's import graph, the way Go's
// go/build/deps_test.go writes the standard library's: for every package of
// the module, the packages of the module it may import (test files aside).
// A new import, or a new package, that is not here fails TestImportGraph:
// add it here on purpose, in the layer where it belongs
// (docs/architecture.md, "Import rules").
//
// The layers, bottom up:
//   - plain formats and memory: dma, dma/pvrdma, dma/mlx5, mmio, doorbell/pvrdma, doorbell/mlx5,
//     uverbs/pvrdma, uverbs/mlx5, emu/pvrdma/abi, emu/mlx5/ifc, emu/roce, emu/ratelog;
//     native InfiniBand's wire formats and management datagrams: emu/ib
//     (on emu/roce, which it shares BTH onward with), emu/ib/mad
//   - the network: emu/fabric, emu/fabric/capture, the InfiniBand subnet
//     with its SM and SA emu/ib/subnet (emu/fabric's packet buffers, a
//     capture's link)
//   - memory regions and the transport, which belong to no device model:
//     emu/mr, emu/transport, emu/transport/rc, emu/transport/ud
//   - the HCA core shared by the device models, which imports none: emu/hca
//     (today its vocabulary: commands, events, faults, findings, stats,
//     traces)
//   - the PVRDMA device model: emu/pvrdma (its ABI: emu/pvrdma/abi)
//   - the ConnectX (mlx5) device model: emu/mlx5 (its PRM layouts:
//     emu/mlx5/ifc; its fake driver: emu/mlx5/mlx5test)
//   - the models' benchmarks' shared yardstick and metrics: emu/benchtest
//     (the standard library only)
//   - fault injection: emu/fault (a fabric decorator for packet faults, the
//     same for the InfiniBand subnet, and the hca.FaultHook a device asks
//     for its own faults), which imports the core, emu/ib and
//     emu/ib/subnet, and no model
//   - the vfio-user server, which knows nothing of RDMA: vfio, vfio/record
//   - provisioning and launching: qemu
//   - the CLI: cmd/hcaemu
//
// Packages ending in "test" are fakes for tests; no other package may import
// them.
var allowedImports = map[string][]string{
	"dma":                            nil,
	"dma/pvrdma":                     {"dma"},
	"dma/mlx5":                       {"dma"},
	"mmio":                           nil,
	"doorbell/pvrdma":                nil,
	"doorbell/mlx5":                  nil,
	"uverbs/pvrdma":                  nil,
	"uverbs/mlx5":                    nil,
	"emu/pvrdma/abi":                 nil,
	"emu/mlx5/ifc":                   nil,
	"emu/roce":                       nil,
	"emu/ib":                         {"emu/roce"},
	"emu/ib/mad":                     nil,
	"emu/ib/subnet":                  {"emu/fabric", "emu/fabric/capture", "emu/ib", "emu/ib/mad", "emu/roce"},
	"emu/ib/ibtest":                  {"emu/fabric/capture"},
	"emu/ratelog":                    nil,
	"emu/fabric":                     nil,
	"emu/fabric/capture":             {"emu/fabric"},
	"emu/fault":                      {"emu/fabric", "emu/hca", "emu/ib", "emu/ib/subnet", "emu/roce"},
	"emu/hca":                        {"dma", "emu/fabric", "emu/mr", "emu/roce", "emu/transport", "emu/transport/rc", "emu/transport/ud"},
	"emu/mr":                         {"dma"},
	"emu/transport":                  {"dma", "emu/mr", "emu/roce"},
	"emu/transport/rc":               {"dma", "emu/mr", "emu/roce", "emu/transport"},
	"emu/transport/ud":               {"dma", "emu/mr", "emu/roce", "emu/transport"},
	"emu/transport/uc":               {"dma", "emu/mr", "emu/roce", "emu/transport"},
	"emu/transport/transporttest":    {"dma", "emu/mr", "emu/roce", "emu/transport"},
	"emu/pvrdma":                     {"dma", "dma/pvrdma", "doorbell/pvrdma", "emu/fabric", "emu/hca", "emu/mr", "emu/pvrdma/abi", "emu/ratelog", "emu/roce", "emu/transport", "emu/transport/rc", "emu/transport/ud", "mmio", "uverbs/pvrdma"},
	"emu/mlx5":                       {"dma", "doorbell/mlx5", "emu/fabric", "emu/hca", "emu/ib", "emu/ib/mad", "emu/ib/subnet", "emu/mlx5/ifc", "emu/mr", "emu/ratelog", "emu/roce", "emu/transport", "emu/transport/rc", "emu/transport/uc", "emu/transport/ud", "mmio", "uverbs/mlx5"},
	"emu/mlx5/mlx5test":              {"dma", "doorbell/mlx5", "emu/mlx5/ifc", "mmio", "uverbs/mlx5"},
	"emu/verbstest":                  {"dma", "emu/fabric", "emu/fabric/capture", "emu/hca", "emu/ib", "emu/ib/subnet", "emu/mr", "emu/roce", "emu/transport"},
	"emu/emutest":                    {"dma", "emu/pvrdma", "emu/pvrdma/abi", "uverbs/pvrdma"},
	"emu/benchtest":                  nil,
	"vfio":                           {"dma"},
	"vfio/record":                    {"dma", "vfio"},
	"vfio/vfiotest":                  {"vfio"},
	"qemu":                           {"emu/fabric"},
	"qemu/guestmod/hcaemu-initramfs": nil,
	"qemu/guestmod/hcaemu-faults":    nil, // built in the guest's module: the standard library only
	"cmd/hcaemu":                     {"emu/pvrdma", "emu/mlx5", "emu/hca", "emu/fabric", "emu/fabric/capture", "emu/fault", "emu/ib/subnet", "qemu", "vfio", "vfio/record"},
	"tests":                          nil,
}

// stdlibOnly are the plain formats that import nothing beyond the standard
// library (not even a third-party module), so that fuzzers and fake drivers
// use them without the device.
var stdlibOnly = map[string]bool{"emu/mlx5/ifc": true, "uverbs/mlx5": true, "doorbell/mlx5": true, "dma/mlx5": true}

// TestImportGraph checks every package's imports of the module against
// allowedImports, and that the hcaemu binary's packages import nothing of the
// initramfs-building stack (u-root, mkuimage, gobusybox: the builder runs as
// a tool at provisioning time).
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/hcaemu/hcaemu/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/hcaemu/hcaemu/"
	rel := func(p string) string {
		if p == strings.TrimSuffix(mod, "/") {
			return "."
		}
		return strings.TrimPrefix(p, mod)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := rel(fields[0])
		seen[pkg] = true
		allowed, known := allowedImports[pkg]
		if !known {
			t.Errorf("package %s is not in allowedImports: add it, with what it may import, in its layer", pkg)
			continue
		}
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/u-root/") && pkg != "qemu/guestmod/hcaemu-initramfs" {
				t.Errorf("%s imports %s: only the initramfs builder tool links u-root", pkg, imp)
			}
			if !strings.HasPrefix(imp, mod) {
				if first, _, _ := strings.Cut(imp, "/"); stdlibOnly[pkg] && strings.Contains(first, ".") {
					t.Errorf("%s imports %s: it is plain data, the standard library only", pkg, imp)
				}
				continue
			}
			dep := rel(imp)
			if strings.HasSuffix(dep, "test") && !strings.HasSuffix(pkg, "test") && pkg != "tests" {
				t.Errorf("%s imports %s: fakes are for tests only", pkg, dep)
			}
			if !ok[dep] {
				t.Errorf("%s imports %s, which allowedImports does not allow", pkg, dep)
			}
		}
	}
	var stale []string
	for pkg := range allowedImports {
		if !seen[pkg] {
			stale = append(stale, pkg)
		}
	}
	sort.Strings(stale)
	for _, pkg := range stale {
		t.Errorf("allowedImports names %s, which does not exist any more", pkg)
	}
}

// deviceModels are the packages of the device models and of their formats:
// what the core and the fault injector must never import.
var deviceModels = []string{"emu/pvrdma", "emu/pvrdma/abi", "uverbs/pvrdma", "doorbell/pvrdma", "dma/pvrdma", "emu/emutest",
	"emu/mlx5", "emu/mlx5/ifc", "emu/mlx5/mlx5test", "uverbs/mlx5", "doorbell/mlx5", "dma/mlx5"}

// TestCoreImportsNoModel: the HCA core and the fault injector import no
// device model, directly or through another package of the module; every
// device model imports the core.
func TestCoreImportsNoModel(t *testing.T) {
	const mod = "github.com/hcaemu/hcaemu/"
	for _, pkg := range []string{"emu/hca", "emu/fault", "emu/verbstest", "emu/transport", "emu/transport/rc", "emu/transport/uc", "emu/transport/ud", "emu/mr", "emu/fabric", "emu/roce",
		"emu/ib", "emu/ib/mad", "emu/ib/subnet", "emu/fabric/capture"} {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, model := range deviceModels {
				if dep == mod+model {
					t.Errorf("%s depends on the device model package %s", pkg, model)
				}
			}
		}
	}
	// The fault injector answers its control commands on connections it is
	// given: the sockets are the CLI's (cmd/hcaemu/control.go).
	for _, pkg := range []string{"emu/hca", "emu/fault"} {
		out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		if strings.Contains(" "+string(out)+" ", " net ") {
			t.Errorf("%s imports net: sockets are the CLI's", pkg)
		}
	}
	for _, model := range []string{"emu/pvrdma", "emu/mlx5"} {
		out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+model).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", model, err)
		}
		if !strings.Contains(" "+string(out)+" ", " "+mod+"emu/hca ") {
			t.Errorf("device model %s does not import the core emu/hca", model)
		}
	}
}
