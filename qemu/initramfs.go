package qemu

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/u-root/gobusybox/src/pkg/golang"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
)

//go:embed init.sh
var initScript string

//go:embed guestmod/go.mod.txt
var guestGoMod []byte

//go:embed guestmod/go.sum.txt
var guestGoSum []byte

// guestCommands are the u-root commands of the guest's busybox (each is also
// a "tool" of the embedded guest Go module, which pins u-root's version).
var guestCommands = []string{
	"init", "gosh", "cat", "dmesg", "echo", "grep", "insmod", "ls", "lsmod", "mount", "pci",
	"shutdown", "ip", "sleep", "uname", "readlink", "ping", "cp", "mkdir", "rm", "sync",
	"printenv", "true", "false", "wc", "head", "tail", "tr", "seq", "ps", "kill", "hostname",
	"timeout", "sort", "tee", "hexdump", "date", "mktemp", "umount", "ln", "chmod", "dd",
	"find", "xargs", "netcat",
}

// rdmaTools are the rdma-core programs put in the guest (from the sid root).
var rdmaTools = []string{
	"ibv_devices", "ibv_devinfo", "ibv_asyncwatch", "ibv_rc_pingpong", "ibv_ud_pingpong",
	"ibv_uc_pingpong", "ibv_srq_pingpong", "ibv_xsrq_pingpong", "rping", "rdma_server", "rdma_client",
	"mckey", "ucmatose", "rdma",
	"ibstat", "ibstatus", "udaddy", "riostream", "rstream", "rdma_xserver", "rdma_xclient",
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
	for _, t := range rdmaTools {
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

func buildInitramfs(ctx context.Context, p *provisioner) error {
	gomod := p.path(dirGoMod)
	if err := os.MkdirAll(gomod, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gomod, "go.mod"), guestGoMod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gomod, "go.sum"), guestGoSum, 0o644); err != nil {
		return err
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
	// Make sure the u-root module and its dependencies are in the module cache.
	if err := p.r.run(ctx, "initramfs", gomod, []string{"GOWORK=off", "GOFLAGS=-mod=mod"}, gobin, "mod", "download", "-x"); err != nil {
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
	for _, m := range append(mods, filepath.Join(guest, "modules", "order")) {
		specs = append(specs, m+":modules/"+filepath.Base(m))
	}
	initPath := filepath.Join(guest, "init.sh")
	if err := os.WriteFile(initPath, []byte(initScript), 0o755); err != nil {
		return err
	}
	specs = append(specs, initPath+":hcaemu/init.sh")
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
	var pkgs []string
	for _, c := range guestCommands {
		pkgs = append(pkgs, "github.com/u-root/u-root/cmds/core/"+c)
	}
	lf, err := os.OpenFile(filepath.Join(p.path(dirLogs), "initramfs.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	var tail tailBuffer
	tail.max = 25
	logger := llog.New(slog.LevelInfo, llog.WritePrintf(io.MultiWriter(lf, &tail)))
	// The builder runs `go` in the guest module; keep the caller's workspace
	// and flags out of it.
	for k, v := range map[string]string{"GOWORK": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"} {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		if had {
			defer os.Setenv(k, old)
		} else {
			defer os.Unsetenv(k)
		}
	}
	if dir := filepath.Dir(gobin); !strings.Contains(os.Getenv("PATH"), dir) {
		old := os.Getenv("PATH")
		os.Setenv("PATH", dir+":"+old)
		defer os.Setenv("PATH", old)
	}
	outPath := filepath.Join(guest, "initramfs.cpio")
	tmpOut := outPath + ".tmp"
	err = uimage.Create(logger,
		uimage.WithReplaceEnv(golang.Default(golang.WithWorkingDir(gomod), golang.WithGOROOT(goroot), golang.DisableCGO())),
		uimage.WithBaseArchive(uimage.DefaultRamfs()),
		uimage.WithBusyboxCommands(pkgs...),
		uimage.WithSkipLDD(),
		uimage.WithFiles(specs...),
		uimage.WithInit("init"),
		uimage.WithUinit("gosh", "/hcaemu/init.sh"),
		uimage.WithShell("gosh"),
		uimage.WithTempDir(tmp),
		uimage.WithCPIOOutput(tmpOut),
	)
	if err != nil {
		return fmt.Errorf("u-root initramfs: %w\n%s", err, tail.String())
	}
	return os.Rename(tmpOut, outPath)
}
