package qemu

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeModule writes a minimal ELF relocatable with a .modinfo section, as a
// kernel module has.
func fakeModule(t *testing.T, path string, info ...string) {
	t.Helper()
	modinfo := []byte(strings.Join(info, "\x00") + "\x00")
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")
	var b bytes.Buffer
	le := binary.LittleEndian
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	le.PutUint16(hdr[16:], 1)  // ET_REL
	le.PutUint16(hdr[18:], 62) // x86-64
	le.PutUint32(hdr[20:], 1)
	shoff := 64 + len(modinfo) + len(shstr)
	le.PutUint64(hdr[40:], uint64(shoff))
	le.PutUint16(hdr[52:], 64)
	le.PutUint16(hdr[58:], 64)
	le.PutUint16(hdr[60:], 3)
	le.PutUint16(hdr[62:], 2)
	b.Write(hdr)
	b.Write(modinfo)
	b.Write(shstr)
	sh := func(name, typ uint32, off, size int) {
		s := make([]byte, 64)
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[24:], uint64(off))
		le.PutUint64(s[32:], uint64(size))
		le.PutUint64(s[48:], 1)
		b.Write(s)
	}
	sh(0, 0, 0, 0)
	sh(1, 1, 64, len(modinfo))
	sh(10, 3, 64+len(modinfo), len(shstr))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeBzImage writes a file with an x86 setup header whose kernel_version
// names release.
func fakeBzImage(t *testing.T, path, release string) {
	t.Helper()
	img := make([]byte, 0x1000)
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(img[0x20e:], 0x300)
	copy(img[0x500:], release+" (builder@example) #1 SMP\x00")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kernelModules are the modules of the fake kernels, with their
// dependencies.
var kernelModules = map[string]string{
	"ib_core": "", "ib_uverbs": "ib_core", "vmxnet3": "", "ib_cm": "ib_core", "iw_cm": "ib_core",
	"configfs": "", "rdma_cm": "ib_core,ib_cm,iw_cm,configfs", "rdma_ucm": "ib_core,rdma_cm,ib_uverbs",
	"vmw_pvrdma": "ib_core,ib_uverbs", "9pnet": "", "9pnet_virtio": "9pnet", "9p": "9pnet",
	"virtio_console": "",
}

func TestPrepareKernel(t *testing.T) {
	const prov, other = "6.12.1-test", "6.19.0-dev"
	cache := t.TempDir()
	guest := filepath.Join(cache, dirGuest)
	for name, deps := range kernelModules {
		fakeModule(t, filepath.Join(guest, "modules", name+".ko"), "name="+name, "depends="+deps, "vermagic="+prov+" SMP mod_unload")
	}
	fakeBzImage(t, filepath.Join(guest, "vmlinuz"), prov)
	env := &Env{CacheDir: cache, Kernel: filepath.Join(guest, "vmlinuz"), KernelRelease: prov}

	// A rebuilt vmw_pvrdma.ko for the provisioned kernel: only it is added.
	patched := t.TempDir()
	fakeModule(t, filepath.Join(patched, "drivers/infiniband/hw/vmw_pvrdma/vmw_pvrdma.ko"), "depends=ib_core,ib_uverbs", "vermagic="+prov+" SMP")
	gk, err := env.PrepareKernel(KernelOptions{ModulesDir: patched})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ib_core", "ib_uverbs", "vmxnet3", "ib_cm", "iw_cm", "configfs", "rdma_cm", "rdma_ucm", "vmw_pvrdma", "9pnet", "9pnet_virtio", "9p", "virtio_console"}
	if d := cmp.Diff(want, gk.Order); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	if len(gk.Files) != 1 || !strings.HasSuffix(gk.Files["vmw_pvrdma"], "hw/vmw_pvrdma/vmw_pvrdma.ko") || gk.Kernel != env.Kernel {
		t.Errorf("files %v, kernel %s", gk.Files, gk.Kernel)
	}

	// --ulp nvme_rdma on the provisioned kernel: it and its dependencies
	// are loaded after the device's (they are in the base initramfs).
	for name, deps := range map[string]string{"nvme_core": "", "nvme_fabrics": "nvme_core", "nvme_rdma": "nvme_core,nvme_fabrics,ib_core,rdma_cm"} {
		fakeModule(t, filepath.Join(guest, "modules", name+".ko"), "name="+name, "depends="+deps, "vermagic="+prov+" SMP mod_unload")
	}
	gk, err = env.PrepareKernel(KernelOptions{ULPs: []string{"nvme_rdma"}})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "nvme_core", "nvme_fabrics", "nvme_rdma")
	if d := cmp.Diff(want, gk.Order); d != "" || len(gk.Files) != 0 {
		t.Errorf("--ulp nvme_rdma: files %v, order (-want +got):\n%s", gk.Files, d)
	}
	if _, err := env.PrepareKernel(KernelOptions{ULPs: []string{"nvmet_rdma"}}); err == nil || !strings.Contains(err.Error(), "lacks module nvmet_rdma (CONFIG_NVME_TARGET_RDMA=m or =y)") {
		t.Errorf("--ulp nvmet_rdma without the module: %v", err)
	}
	if _, err := env.PrepareKernel(KernelOptions{ULPs: []string{"vmw_pvrdma"}}); err == nil || !strings.Contains(err.Error(), "not an upper-layer protocol module") {
		t.Errorf("--ulp vmw_pvrdma: %v", err)
	}

	// Another kernel with its own tree: every module comes from the tree;
	// modules.builtin makes configfs built in.
	tree := t.TempDir()
	fakeBzImage(t, filepath.Join(tree, "arch/x86/boot/bzImage"), other)
	for name, deps := range kernelModules {
		if name != "configfs" && name != "9p" {
			fakeModule(t, filepath.Join(tree, "drivers", strings.ReplaceAll(name, "_", "-")+".ko"), "depends="+deps, "vermagic="+other+" SMP")
		}
	}
	os.WriteFile(filepath.Join(tree, "modules.builtin"), []byte("kernel/fs/configfs/configfs.ko\n"), 0o644)
	opts, err := TreeOptions(tree)
	if err != nil {
		t.Fatal(err)
	}
	gk, err = env.PrepareKernel(opts)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"ib_core", "ib_uverbs", "vmxnet3", "ib_cm", "iw_cm", "rdma_cm", "rdma_ucm", "vmw_pvrdma", "9pnet", "9pnet_virtio", "virtio_console"}
	if d := cmp.Diff(want, gk.Order); d != "" || gk.Release != other || len(gk.Files) != len(want) {
		t.Errorf("tree: release %s, files %v, order (-want +got):\n%s", gk.Release, gk.Files, d)
	}
	// Without 9p, --share cannot work.
	opts.Shares = true
	if _, err := env.PrepareKernel(opts); err == nil || !strings.Contains(err.Error(), "lacks module 9p (CONFIG_9P_FS=m or =y)") {
		t.Errorf("tree without 9p and shares: %v", err)
	}

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) KernelOptions
		want  string
	}{
		{"other kernel, no modules", func(t *testing.T) KernelOptions {
			return KernelOptions{Kernel: filepath.Join(tree, "arch/x86/boot/bzImage")}
		}, "kernel 6.19.0-dev is not the provisioned 6.12.1-test: give its modules with --modules"},
		{"module for another kernel", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			fakeModule(t, filepath.Join(dir, "vmw_pvrdma.ko"), "depends=ib_core", "vermagic=5.10.0 SMP")
			return KernelOptions{ModulesDir: dir}
		}, `vmw_pvrdma.ko is built for kernel "5.10.0", the guest kernel is 6.12.1-test`},
		{"no vmw_pvrdma", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			fakeBzImage(t, filepath.Join(dir, "arch/x86/boot/bzImage"), other)
			fakeModule(t, filepath.Join(dir, "ib_core.ko"), "vermagic="+other)
			return KernelOptions{Kernel: filepath.Join(dir, "arch/x86/boot/bzImage"), ModulesDir: dir}
		}, "guest kernel 6.19.0-dev lacks module ib_uverbs (CONFIG_INFINIBAND_USER_ACCESS=m or =y)"},
		{"config without the driver", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, ".config"), []byte("CONFIG_INFINIBAND=m\nCONFIG_INFINIBAND_USER_ACCESS=m\nCONFIG_VMXNET3=m\nCONFIG_INFINIBAND_ADDR_TRANS=y\n# CONFIG_INFINIBAND_VMWARE_PVRDMA is not set\n"), 0o644)
			fakeModule(t, filepath.Join(dir, "ib_core.ko"), "vermagic="+prov)
			return KernelOptions{ModulesDir: dir}
		}, "CONFIG_INFINIBAND_VMWARE_PVRDMA is not set (=m or =y): the guests need vmw_pvrdma"},
		{"missing dependency", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			fakeModule(t, filepath.Join(dir, "vmw_pvrdma.ko"), "depends=ib_core,pvrdma_helper", "vermagic="+prov)
			return KernelOptions{ModulesDir: dir}
		}, "module pvrdma_helper not found in the guest kernel"},
		{"not a module", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "vmw_pvrdma.ko"), []byte("not ELF"), 0o644)
			return KernelOptions{ModulesDir: dir}
		}, "vmw_pvrdma.ko: not a kernel module"},
		{"compressed only", func(t *testing.T) KernelOptions {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "vmw_pvrdma.ko.xz"), []byte("xz"), 0o644)
			return KernelOptions{ModulesDir: dir}
		}, "only compressed modules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := env.PrepareKernel(tc.setup(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err %v, want one line with %q", err, tc.want)
			}
		})
	}
}

func TestParseULPs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"nvme-rdma", []string{"nvme_rdma"}, ""},
		{"nvme_rdma, nvmet-rdma,nvme_rdma,", []string{"nvme_rdma", "nvmet_rdma"}, ""},
		{"ib_ipoib,rpcrdma", []string{"ib_ipoib", "rpcrdma"}, ""},
		{"nvme_tcp", nil, `"nvme_tcp" is not one of the upper-layer protocols: nvme_rdma, nvmet_rdma`},
		{"../../evil", nil, "is not one of the upper-layer protocols"},
	} {
		got, err := ParseULPs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseULPs(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseULPs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestKernelRelease(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "bzImage")
	fakeBzImage(t, img, "6.12.117+deb13-amd64")
	if rel, err := KernelRelease(img); err != nil || rel != "6.12.117+deb13-amd64" {
		t.Errorf("KernelRelease = %q, %v", rel, err)
	}
	for name, content := range map[string][]byte{"short": []byte("MZ"), "no header": make([]byte, 0x1000)} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, content, 0o644)
		if _, err := KernelRelease(p); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	if _, err := TreeOptions(dir); err == nil || !strings.Contains(err.Error(), "has no arch/x86/boot/bzImage") {
		t.Errorf("TreeOptions of a non-tree: %v", err)
	}
}

// A kernel prepared for mlx5 guests: the mlx5 modules (with their
// dependencies) in MLX5Order, after Order, from the kernel's modules;
// vmw_pvrdma is not required then.
func TestPrepareKernelMLX5(t *testing.T) {
	const other = "6.19.0-dev"
	env := &Env{CacheDir: t.TempDir(), KernelRelease: "6.12.1-test"}
	tree := t.TempDir()
	fakeBzImage(t, filepath.Join(tree, "arch/x86/boot/bzImage"), other)
	mods := map[string]string{"mlx5_core": "mlxfw,pci-hyperv-intf", "mlx5_ib": "mlx5_core,ib_core,ib_uverbs",
		"mlxfw": "", "pci-hyperv-intf": "", "ib_ipoib": "ib_core,ib_cm"}
	for name, deps := range kernelModules {
		if name != "vmw_pvrdma" {
			mods[name] = deps
		}
	}
	for name, deps := range mods {
		fakeModule(t, filepath.Join(tree, "drivers", name+".ko"), "depends="+deps, "vermagic="+other+" SMP")
	}
	opts, err := TreeOptions(tree)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.PrepareKernel(opts); err == nil || !strings.Contains(err.Error(), "lacks module vmw_pvrdma") {
		t.Errorf("pvrdma guests without vmw_pvrdma: %v", err)
	}
	// Both HCAs in each guest: vmw_pvrdma is required again.
	opts.Model = ModelPVRDMAMLX5
	if _, err := env.PrepareKernel(opts); err == nil || !strings.Contains(err.Error(), "lacks module vmw_pvrdma") {
		t.Errorf("pvrdma,mlx5 guests without vmw_pvrdma: %v", err)
	}
	opts.Model = ModelMLX5
	gk, err := env.PrepareKernel(opts)
	if err != nil {
		t.Fatal(err)
	}
	if gk.Model != ModelMLX5 || slices.Contains(gk.Order, "mlx5_core") || slices.Contains(gk.Order, "ib_ipoib") {
		t.Errorf("model %q, order %v", gk.Model, gk.Order)
	}
	// (a tree's modules are named with "_", as findModules finds them)
	if d := cmp.Diff([]string{"mlxfw", "pci_hyperv_intf", "mlx5_core", "mlx5_ib", "ib_ipoib"}, gk.MLX5Order); d != "" {
		t.Errorf("MLX5Order (-want +got):\n%s", d)
	}
	for _, m := range gk.MLX5Order {
		if gk.Files[m] != filepath.Join(tree, "drivers", strings.ReplaceAll(m, "pci_hyperv_intf", "pci-hyperv-intf")+".ko") {
			t.Errorf("file of %s: %q", m, gk.Files[m])
		}
	}
	os.Remove(filepath.Join(tree, "drivers", "mlx5_ib.ko"))
	if _, err := env.PrepareKernel(opts); err == nil || !strings.Contains(err.Error(), "lacks module mlx5_ib (CONFIG_MLX5_INFINIBAND=m or =y)") {
		t.Errorf("mlx5 guests without mlx5_ib: %v", err)
	}
	var config strings.Builder
	for _, m := range requiredModules {
		config.WriteString(moduleOption[m] + "=m\n")
	}
	os.WriteFile(filepath.Join(tree, ".config"), []byte(config.String()), 0o644)
	if _, err := env.PrepareKernel(opts); err == nil || !strings.Contains(err.Error(), "CONFIG_MLX5_CORE is not set") {
		t.Errorf(".config without mlx5: %v", err)
	}
}
