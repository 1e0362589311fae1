package qemu

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed init.sh
var initScript string

//go:embed guestmod/go.mod.txt
var guestGoMod []byte

//go:embed guestmod/go.sum.txt
var guestGoSum []byte

// The builder of the guest's archives (package main, built at provisioning
// time in the guest module, so that hcaemu itself links nothing of u-root).
//
//go:embed guestmod/hcaemu-initramfs/main.go
var builderSource []byte

// faultsSource is the guest's hcaemu-faults command (package main, standard
// library only), built at provisioning time like the builder and put in the
// initramfs as /bin/hcaemu-faults.
//
//go:embed guestmod/hcaemu-faults/main.go
var faultsSource []byte

// faultsDir is its package directory in the guest module.
const faultsDir = "hcaemu-faults"

// readyScript is the guest's hcaemu-ready: the command runs it to say it is
// ready (--ready marker; also heard in listen mode). The init watches for
// the file it creates.
const readyScript = "#!/bbin/gosh\n: > /tmp/.hcaemu-ready\n"

// builderDir is the builder's package directory in the guest module.
const builderDir = "hcaemu-initramfs"

// guestCommands are the u-root commands of the guest's busybox: the "tool"
// directives of the embedded guest Go module, which pins u-root's version
// and keeps them in its go.mod. That go.mod is the one list.
var guestCommands = toolsOf(guestGoMod)

// toolsOf returns the packages a go.mod names in "tool" directives (single
// line form), in order.
func toolsOf(gomod []byte) []string {
	var tools []string
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "tool" {
			tools = append(tools, f[1])
		}
	}
	return tools
}

// rdmaTools are the rdma-core programs put in the guest (from the sid root);
// the README lists them (TestGuestToolsInREADME).
var rdmaTools = []string{
	"ibv_devices", "ibv_devinfo", "ibv_asyncwatch", "ibv_rc_pingpong", "ibv_ud_pingpong",
	"ibv_uc_pingpong", "ibv_srq_pingpong", "rping", "rdma_server", "rdma_client",
	"mckey", "ucmatose", "rdma",
}

// optionalTools are put in the guest when the sid root has them.
var optionalTools = []string{"ibstat", "ibstatus", "ibv_xsrq_pingpong", "udaddy", "riostream", "rstream", "rdma_xserver", "rdma_xclient"}

func findInRoot(root, name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := path.Join(d, name)
		if _, err := resolveIn(root, p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, root)
}

// guestFiles lists the sid root's files that go into the initramfs.
func guestFiles(root string) (*fileSet, error) {
	fs := newFileSet(root)
	optional := map[string]bool{}
	for _, t := range optionalTools {
		optional[t] = true
	}
	for _, t := range append(append([]string(nil), rdmaTools...), optionalTools...) {
		p, err := findInRoot(root, t)
		if err != nil {
			if optional[t] {
				continue
			}
			return nil, err
		}
		if err := fs.addELF(p); err != nil {
			return nil, err
		}
	}
	perf, _ := filepath.Glob(filepath.Join(root, "usr/bin/ib_*_bw"))
	lat, _ := filepath.Glob(filepath.Join(root, "usr/bin/ib_*_lat"))
	perf = append(perf, lat...)
	if len(perf) == 0 {
		return nil, fmt.Errorf("perftest programs (ib_*_bw, ib_*_lat) not found in %s", root)
	}
	for _, p := range perf {
		if err := fs.addELF("/usr/bin/" + filepath.Base(p)); err != nil {
			return nil, err
		}
	}
	provDir, err := resolveIn(root, "/usr/lib/x86_64-linux-gnu/libibverbs")
	if err != nil {
		return nil, fmt.Errorf("no libibverbs provider directory in %s: %w", root, err)
	}
	provs, _ := filepath.Glob(filepath.Join(root, provDir, "*.so"))
	if len(provs) == 0 {
		return nil, fmt.Errorf("no libibverbs providers in %s", filepath.Join(root, provDir))
	}
	for _, p := range provs {
		if err := fs.addELF("/usr/lib/x86_64-linux-gnu/libibverbs/" + filepath.Base(p)); err != nil {
			return nil, err
		}
	}
	drivers, _ := filepath.Glob(filepath.Join(root, "etc/libibverbs.d/*"))
	for _, d := range drivers {
		if err := fs.add("/etc/libibverbs.d/" + filepath.Base(d)); err != nil {
			return nil, err
		}
	}
	// glibc dlopens libgcc_s for pthread_cancel/unwinding (rping aborts without it).
	if err := fs.addELF("/lib/x86_64-linux-gnu/libgcc_s.so.1"); err != nil {
		return nil, err
	}
	for _, f := range []string{"/etc/protocols", "/etc/services", "/etc/rdma/rdma_cm.conf"} {
		if _, err := resolveIn(root, f); err == nil {
			if err := fs.add(f); err != nil {
				return nil, err
			}
		}
	}
	return fs, nil
}

func goTool() (string, error) {
	if g, err := exec.LookPath("go"); err == nil {
		return g, nil
	}
	for _, g := range []string{"/usr/local/go/bin/go", "/usr/lib/go/bin/go"} {
		if _, err := os.Stat(g); err == nil {
			return g, nil
		}
	}
	return "", fmt.Errorf("the go command is needed to build the guest's u-root commands: install Go or put it in PATH")
}

// builderPath is where provisioning puts the archive builder.
func builderPath(cacheDir string) string {
	return filepath.Join(cacheDir, dirGuest, "hcaemu-initramfs")
}

func buildInitramfs(ctx context.Context, p *provisioner) error {
	gomod := p.path(dirGoMod)
	if err := os.MkdirAll(filepath.Join(gomod, builderDir), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(gomod, faultsDir), 0o755); err != nil {
		return err
	}
	for name, content := range map[string][]byte{"go.mod": guestGoMod, "go.sum": guestGoSum,
		filepath.Join(builderDir, "main.go"): builderSource, filepath.Join(faultsDir, "main.go"): faultsSource} {
		if err := os.WriteFile(filepath.Join(gomod, name), content, 0o644); err != nil {
			return err
		}
	}
	gobin, err := goTool()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, gobin, "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	goroot := strings.TrimSpace(string(out))
	// The builder runs `go` in the guest module; keep the caller's workspace
	// and flags out of it.
	goEnv := []string{"GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0",
		"PATH=" + filepath.Dir(gobin) + ":" + os.Getenv("PATH")}
	// Make sure the u-root module and its dependencies are in the module cache.
	if err := p.r.run(ctx, "initramfs", gomod, goEnv, gobin, "mod", "download", "-x"); err != nil {
		return err
	}
	builder := builderPath(p.cache)
	if err := p.r.run(ctx, "initramfs", gomod, goEnv, gobin, "build", "-o", builder+".tmp", "./"+builderDir); err != nil {
		return err
	}
	if err := os.Rename(builder+".tmp", builder); err != nil {
		return err
	}
	faultsCmd := filepath.Join(p.path(dirGuest), "hcaemu-faults")
	if err := p.r.run(ctx, "initramfs", gomod, goEnv, gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", faultsCmd, "./"+faultsDir); err != nil {
		return err
	}

	fs, err := guestFiles(p.path(dirSid))
	if err != nil {
		return err
	}
	specs := fs.specs()
	guest := p.path(dirGuest)
	mods, err := filepath.Glob(filepath.Join(guest, "modules", "*.ko"))
	if err != nil || len(mods) == 0 {
		return fmt.Errorf("no modules in %s", filepath.Join(guest, "modules"))
	}
	for _, m := range append(mods, filepath.Join(guest, "modules", "order"), filepath.Join(guest, "modules", "order.image"), filepath.Join(guest, "modules", "order.mlx5")) {
		specs = append(specs, m+":modules/"+filepath.Base(m))
	}
	initPath := filepath.Join(guest, "init.sh")
	if err := os.WriteFile(initPath, []byte(initScript), 0o755); err != nil {
		return err
	}
	specs = append(specs, initPath+":hcaemu/init.sh")
	readyPath := filepath.Join(guest, "hcaemu-ready")
	if err := os.WriteFile(readyPath, []byte(readyScript), 0o755); err != nil {
		return err
	}
	specs = append(specs, readyPath+":bin/hcaemu-ready", faultsCmd+":bin/hcaemu-faults")
	sort.Strings(specs)

	// Leftovers of an interrupted build.
	old, _ := filepath.Glob(filepath.Join(guest, "build*"))
	for _, o := range old {
		os.RemoveAll(o)
	}
	tmp, err := os.MkdirTemp(guest, "build")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	outPath := filepath.Join(guest, "initramfs.cpio")
	tmpOut := outPath + ".tmp"
	args := []string{"build", "-o", tmpOut, "-gomod", gomod, "-goroot", goroot, "-tmp", tmp}
	for _, c := range guestCommands {
		args = append(args, "-command", c)
	}
	for _, f := range specs {
		args = append(args, "-file", f)
	}
	if err := p.r.run(ctx, "initramfs", gomod, goEnv, builder, args...); err != nil {
		return fmt.Errorf("u-root initramfs: %w", err)
	}
	return os.Rename(tmpOut, outPath)
}

// makeInitrd writes the run's initrd: the base initramfs with a small cpio
// holding the command appended (the kernel unpacks concatenated archives),
// written by the provisioned builder.
//
// files (SRC:DST) are added to the small cpio too.
func makeInitrd(ctx context.Context, builder, base, out, script string, files []string) error {
	if builder == "" {
		return errors.New("no initramfs builder (Env.Builder): provision first")
	}
	args := []string{"append", "-base", base, "-o", out, "-name", "hcaemu/cmd.sh"}
	for _, f := range files {
		args = append(args, "-file", f)
	}
	cmd := exec.CommandContext(ctx, builder, args...)
	cmd.Stdin = strings.NewReader(script)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(builder), err, bytes.TrimSpace(msg))
	}
	return nil
}
