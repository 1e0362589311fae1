package qemu

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// GuestKernel is a kernel and modules a run boots instead of the provisioned
// ones (hcaemu run --kernel/--modules/--kernel-tree): a driver developer's
// kernel, or the provisioned kernel with a rebuilt vmw_pvrdma.ko.
type GuestKernel struct {
	// Kernel is the bzImage.
	Kernel string
	// Release is the kernel's release (uname -r), from the bzImage header.
	Release string
	// Order is the module load order (module names).
	Order []string
	// Files are the modules the run's archive carries (name -> .ko path):
	// all of them for another kernel, the replaced ones for the
	// provisioned kernel (its others are in the base initramfs).
	Files map[string]string
	// Model is the device model the modules were chosen for
	// (KernelOptions.Model); for a model with an mlx5 HCA (HasMLX5),
	// MLX5Order is what the guest loads after Order (the
	// /modules/order.mlx5 file).
	Model     DeviceModel
	MLX5Order []string
}

// moduleOption is the kernel option of each module the guests load, for
// messages about a kernel that lacks one.
var moduleOption = map[string]string{
	"ib_core": "CONFIG_INFINIBAND", "ib_uverbs": "CONFIG_INFINIBAND_USER_ACCESS",
	"vmxnet3": "CONFIG_VMXNET3", "ib_cm": "CONFIG_INFINIBAND", "iw_cm": "CONFIG_INFINIBAND",
	"configfs": "CONFIG_CONFIGFS_FS", "rdma_cm": "CONFIG_INFINIBAND_ADDR_TRANS",
	"rdma_ucm": "CONFIG_INFINIBAND_USER_ACCESS", "ib_umad": "CONFIG_INFINIBAND_USER_MAD",
	"crc32_generic": "CONFIG_CRC32", "udp_tunnel": "CONFIG_NET_UDP_TUNNEL",
	"ip6_udp_tunnel": "CONFIG_NET_UDP_TUNNEL", "rdma_rxe": "CONFIG_RDMA_RXE",
	"vmw_pvrdma":   "CONFIG_INFINIBAND_VMWARE_PVRDMA",
	"9pnet_virtio": "CONFIG_NET_9P_VIRTIO", "9p": "CONFIG_9P_FS",
	"virtio_console": "CONFIG_VIRTIO_CONSOLE",
	"nvme_rdma":      "CONFIG_NVME_RDMA", "nvmet_rdma": "CONFIG_NVME_TARGET_RDMA",
	"ib_ipoib": "CONFIG_INFINIBAND_IPOIB", "ib_iser": "CONFIG_INFINIBAND_ISER",
	"ib_srp": "CONFIG_INFINIBAND_SRP", "rpcrdma": "CONFIG_SUNRPC_XPRT_RDMA",
	"mlx5_core": "CONFIG_MLX5_CORE", "mlx5_ib": "CONFIG_MLX5_INFINIBAND",
}

// requiredModules are what the device and the guest init need; the others
// of guestModules are loaded when the kernel has them.
var requiredModules = []string{"ib_core", "ib_uverbs", "vmxnet3", "ib_cm", "iw_cm", "rdma_cm", "rdma_ucm", "vmw_pvrdma"}

// shareModules are needed for --share.
var shareModules = []string{"9pnet_virtio", "9p"}

// maxModuleFiles bounds the .ko files looked at in a modules directory.
const maxModuleFiles = 20000

// KernelOptions say where a run's kernel and modules come from.
type KernelOptions struct {
	// Kernel is a bzImage ("" = the provisioned kernel).
	Kernel string
	// ModulesDir is searched (recursively) for .ko files; they replace
	// the provisioned modules of the same name. A modules.builtin file in
	// it names built-in modules; a .config is checked for the options the
	// device needs.
	ModulesDir string
	// Shares: the 9p modules are required.
	Shares bool
	// ULPs are upper-layer protocol modules (of ULPModules) to load after
	// the device's, with their dependencies (ParseULPs).
	ULPs []string
	// Model is the guests' device model ("" = ModelPVRDMA): ModelMLX5 and
	// ModelPVRDMAMLX5 require the mlx5 modules too (GuestKernel.MLX5Order).
	Model DeviceModel
}

// ParseULPs parses a comma-separated --ulp list: names of ULPModules, with
// "-" read as "_" (nvme-rdma or nvme_rdma), duplicates removed.
func ParseULPs(s string) ([]string, error) {
	var ulps []string
	for _, name := range strings.Split(s, ",") {
		name = strings.ReplaceAll(strings.TrimSpace(name), "-", "_")
		if name == "" {
			continue
		}
		if !slices.Contains(ULPModules, name) {
			return nil, fmt.Errorf("%q is not one of the upper-layer protocols: %s", name, strings.Join(ULPModules, ", "))
		}
		if !slices.Contains(ulps, name) {
			ulps = append(ulps, name)
		}
	}
	return ulps, nil
}

// TreeOptions returns the KernelOptions of a kernel build tree: its
// arch/x86/boot/bzImage and the modules built in it.
func TreeOptions(tree string) (KernelOptions, error) {
	fi, err := os.Stat(tree)
	if err != nil {
		return KernelOptions{}, fmt.Errorf("kernel tree: %v", err)
	}
	if !fi.IsDir() {
		return KernelOptions{}, fmt.Errorf("kernel tree %s is not a directory", tree)
	}
	k := filepath.Join(tree, "arch", "x86", "boot", "bzImage")
	if _, err := os.Stat(k); err != nil {
		return KernelOptions{}, fmt.Errorf("kernel tree %s has no arch/x86/boot/bzImage (build it: make bzImage modules)", tree)
	}
	return KernelOptions{Kernel: k, ModulesDir: tree}, nil
}

// PrepareKernel checks a run's kernel and modules against what the device
// needs and returns the load order. The errors name the missing option or
// module, or the file at fault.
func (e *Env) PrepareKernel(opts KernelOptions) (*GuestKernel, error) {
	gk := &GuestKernel{Kernel: e.Kernel, Release: e.KernelRelease, Files: map[string]string{}}
	if opts.Kernel != "" {
		rel, err := KernelRelease(opts.Kernel)
		if err != nil {
			return nil, fmt.Errorf("--kernel %s: %v", opts.Kernel, err)
		}
		gk.Kernel, gk.Release = opts.Kernel, rel
	}
	provisioned := gk.Release == e.KernelRelease && e.KernelRelease != ""
	mods := map[string]string{} // name -> .ko path
	builtin := map[string]bool{}
	if provisioned {
		// The provisioned modules (in the base initramfs) are the base.
		dir := filepath.Join(e.CacheDir, dirGuest, "modules")
		kos, _ := filepath.Glob(filepath.Join(dir, "*.ko"))
		for _, ko := range kos {
			mods[strings.TrimSuffix(filepath.Base(ko), ".ko")] = ko
		}
		if deps, err := os.ReadFile(filepath.Join(e.CacheDir, dirGuest, "modules.deps")); err == nil {
			for _, l := range strings.Split(string(deps), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[1] == "builtin" {
					builtin[f[0]] = true
				}
			}
		}
	} else if opts.ModulesDir == "" {
		return nil, fmt.Errorf("--kernel %s: kernel %s is not the provisioned %s: give its modules with --modules DIR or use --kernel-tree", opts.Kernel, gk.Release, e.KernelRelease)
	}
	replaced := map[string]bool{}
	if opts.ModulesDir != "" {
		found, err := findModules(opts.ModulesDir)
		if err != nil {
			return nil, fmt.Errorf("--modules %s: %v", opts.ModulesDir, err)
		}
		for name, ko := range found {
			// The provisioned file's name (nvme-core.ko) when it has one.
			if alt := strings.ReplaceAll(name, "_", "-"); alt != name && mods[alt] != "" {
				name = alt
			}
			mods[name] = ko
			replaced[name] = true
		}
		for _, b := range readBuiltin(opts.ModulesDir) {
			builtin[b] = true
		}
		if err := checkConfig(filepath.Join(opts.ModulesDir, ".config"), opts.Shares, opts.Model); err != nil {
			return nil, err
		}
	}
	required := requiredFor(opts.Shares, opts.Model)
	lacks := func(m string) error {
		return fmt.Errorf("guest kernel %s lacks module %s (%s=m or =y): no %s.ko found and it is not built in", gk.Release, m, moduleOption[m], m)
	}
	var preferred []string
	for _, m := range guestModules {
		_, have := mods[m]
		switch {
		case have || builtin[m]:
			preferred = append(preferred, m)
		case slices.Contains(required, m):
			return nil, lacks(m)
		}
	}
	for _, m := range opts.ULPs {
		if !slices.Contains(ULPModules, m) {
			return nil, fmt.Errorf("%s is not an upper-layer protocol module (%s)", m, strings.Join(ULPModules, ", "))
		}
		if _, have := mods[m]; !have && !builtin[m] {
			return nil, lacks(m)
		}
		preferred = append(preferred, m)
	}
	var more []string // loaded after the others: the model's
	if opts.Model.HasMLX5() {
		for _, m := range mlx5Modules {
			if _, have := mods[m]; !have && !builtin[m] {
				return nil, lacks(m)
			}
		}
		more = mlx5Modules
	}
	// The dependencies of the modules to load, from their .modinfo.
	var deps strings.Builder
	todo := slices.Concat(preferred, more)
	seen := map[string]bool{}
	for len(todo) > 0 && len(seen) < maxModuleFiles {
		name := todo[0]
		todo = todo[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		ko, have := mods[name]
		switch {
		case builtin[name]:
			fmt.Fprintf(&deps, "%s builtin\n", name)
			continue
		case !have:
			continue // moduleOrder names it
		}
		info, err := modInfo(ko)
		if err != nil {
			return nil, fmt.Errorf("module %s: %v", ko, err)
		}
		if vm := strings.Fields(info["vermagic"]); len(vm) == 0 || vm[0] != gk.Release {
			return nil, fmt.Errorf("module %s is built for kernel %q, the guest kernel is %s", ko, strings.Join(vm[:min(1, len(vm))], ""), gk.Release)
		}
		d := strings.Fields(strings.ReplaceAll(info["depends"], ",", " "))
		for i, n := range d {
			// depends= names a module as its file is named (pci-hyperv-intf),
			// a tree's modules are found with "_" (findModules).
			if _, have := mods[n]; !have && !builtin[n] {
				if alt := strings.ReplaceAll(n, "-", "_"); mods[alt] != "" || builtin[alt] {
					d[i] = alt
				}
			}
		}
		fmt.Fprintf(&deps, "%s module %s\n", name, strings.Join(d, " "))
		todo = append(todo, d...)
	}
	order, err := moduleOrder(deps.String(), preferred)
	if err != nil {
		return nil, fmt.Errorf("guest kernel %s: %v", gk.Release, err)
	}
	gk.Order = order
	if opts.Model.HasMLX5() {
		all, err := moduleOrder(deps.String(), slices.Concat(preferred, more))
		if err != nil {
			return nil, fmt.Errorf("guest kernel %s: %v", gk.Release, err)
		}
		gk.Model = opts.Model
		gk.MLX5Order = slices.DeleteFunc(all, func(m string) bool { return slices.Contains(order, m) })
	}
	for _, m := range slices.Concat(order, gk.MLX5Order) {
		if !provisioned || replaced[m] {
			gk.Files[m] = mods[m]
		}
	}
	return gk, nil
}

// findModules returns the .ko files below dir by module name (the file name
// with - read as _).
func findModules(dir string) (map[string]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, errors.New("not a directory")
	}
	mods := map[string]string{}
	compressed := ""
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable corners of a tree do not matter
		}
		if d.IsDir() {
			if name := d.Name(); path != dir && (name == ".git" || name == "Documentation" || name == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		switch {
		case strings.HasSuffix(name, ".ko"):
			if n++; n > maxModuleFiles {
				return fmt.Errorf("more than %d .ko files", maxModuleFiles)
			}
			mod := strings.ReplaceAll(strings.TrimSuffix(name, ".ko"), "-", "_")
			if prev, ok := mods[mod]; ok {
				return fmt.Errorf("two files for module %s: %s and %s", mod, prev, path)
			}
			mods[mod] = path
		case strings.HasSuffix(name, ".ko.xz") || strings.HasSuffix(name, ".ko.zst") || strings.HasSuffix(name, ".ko.gz"):
			compressed = path
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		if compressed != "" {
			return nil, fmt.Errorf("only compressed modules (%s): decompress them (.ko)", compressed)
		}
		return nil, errors.New("no .ko files")
	}
	return mods, nil
}

// readBuiltin returns the module names of dir/modules.builtin (a kernel
// tree's, or an installed kernel's), if there is one.
func readBuiltin(dir string) []string {
	f, err := os.Open(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasSuffix(l, ".ko") {
			names = append(names, strings.ReplaceAll(strings.TrimSuffix(filepath.Base(l), ".ko"), "-", "_"))
		}
	}
	return names
}

// requiredFor returns the modules a kernel must have (as modules or built
// in): the device's, the 9p ones for shares, the mlx5 model's.
func requiredFor(shares bool, model DeviceModel) []string {
	required := slices.Clone(requiredModules)
	if shares {
		required = append(required, shareModules...)
	}
	if !model.HasPVRDMA() {
		// (vmw_pvrdma is loaded when there is one, for nothing)
		required = slices.DeleteFunc(required, func(m string) bool { return m == "vmw_pvrdma" })
	}
	if model.HasMLX5() {
		required = append(required, mlx5Modules...)
	}
	return required
}

// checkConfig checks a kernel .config (if there is one) for the options of
// the required modules.
func checkConfig(path string, shares bool, model DeviceModel) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	set := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.HasPrefix(k, "CONFIG_") && (v == "y" || v == "m") {
			set[k] = true
		}
	}
	for _, m := range requiredFor(shares, model) {
		if opt := moduleOption[m]; !set[opt] {
			return fmt.Errorf("kernel config %s: %s is not set (=m or =y): the guests need %s", path, opt, m)
		}
	}
	return nil
}

// modInfo returns the key=value pairs of a module's .modinfo section.
func modInfo(path string) (map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("not a kernel module: %v", err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, errors.New("not a kernel module: no .modinfo section")
	}
	if sec.Size > 1<<20 {
		return nil, errors.New(".modinfo section too large")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			if _, dup := info[k]; !dup {
				info[k] = v
			}
		}
	}
	return info, nil
}

// KernelRelease reads the release of an x86 bzImage from its setup header
// (the kernel_version string).
func KernelRelease(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var hdr [0x210]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return "", errors.New("not an x86 bzImage (too short)")
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return "", errors.New("not an x86 bzImage (no HdrS setup header)")
	}
	off := int64(binary.LittleEndian.Uint16(hdr[0x20e:])) + 0x200
	var ver [256]byte
	n, _ := f.ReadAt(ver[:], off)
	s := string(ver[:n])
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	fields := strings.Fields(s)
	if len(fields) == 0 || off == 0x200 {
		return "", errors.New("bzImage has no kernel version string")
	}
	return fields[0], nil
}
