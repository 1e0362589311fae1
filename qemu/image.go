package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The Debian image (--image debian): a root file system made with mmdebstrap
// that the guests attach read-only as a virtio disk. The u-root initramfs
// stays the boot stage: its init mounts the image under a tmpfs overlay and
// runs the command chrooted into it.

// ImageDebian is the one image kind: Debian trixie (its rdma-core 56 is the
// userland of the trixie 6.12 guest kernel).
const ImageDebian = "debian"

// imageSuite is the Debian suite of the image: the guest kernel's (trixie's
// 6.12), so that rdma-core's userland matches the kernel's uverbs ABI.
const imageSuite = "trixie"

// recipeImage versions the image recipe: bump it to rebuild every image.
const recipeImage = "image-v1"

// dirImages holds one directory per image (by key hash).
const dirImages = "images"

// imageBasePackages are in every Debian image: rdma-core's userland (the
// same programs as the initramfs's), and e2fsprogs for mke2fs, which writes
// the disk image from the tree.
var imageBasePackages = []string{
	"ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "perftest", "iproute2",
	"kmod", "procps", "e2fsprogs",
}

// imageModules are the guest modules the image needs (with their
// dependencies): the virtio disk, its file system and the overlay that keeps
// the guest's writes in RAM. They are loaded only when an image is attached
// (/modules/order.image). ext4 asks for the "crc32c" hash at every mount
// (no modprobe in the guest to load it on request): crc32c_generic first.
var imageModules = []string{"virtio_blk", "crc32c_generic", "ext4", "overlay"}

// imageFSFeatures are the ext4 features of the disk image turned off: no
// journal and no metadata checksums (it is never written).
const imageFSFeatures = "^has_journal,^metadata_csum"

// maxImagePackages bounds --packages.
const maxImagePackages = 64

// debPackageRe is a Debian package name, optionally with =VERSION.
var debPackageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+~:-]{1,100})?$`)

// ParsePackages parses a comma-separated --packages list: Debian package
// names (optionally NAME=VERSION), duplicates removed, sorted.
func ParsePackages(s string) ([]string, error) {
	var pkgs []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !debPackageRe.MatchString(p) {
			return nil, fmt.Errorf("%q is not a Debian package name (NAME or NAME=VERSION)", p)
		}
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) > maxImagePackages {
		return nil, fmt.Errorf("at most %d packages, not %d", maxImagePackages, len(pkgs))
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

// imageReadyScript is the image's hcaemu-ready (see readyScript): /tmp is the
// init's own, bound into the image.
const imageReadyScript = "#!/bin/sh\n: > /tmp/.hcaemu-ready\n"

// imagePackages is the image's full, sorted package set.
func imagePackages(extra []string) []string {
	pkgs := slices.Clone(imageBasePackages)
	for _, p := range extra {
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	slices.Sort(pkgs)
	return pkgs
}

// imageKey is the cache key of an image: the recipe, the suite and the
// sorted package set.
func imageKey(extra []string) string {
	return recipeImage + " " + imageSuite + " " + strings.Join(imagePackages(extra), ",") + " " + hash(imageReadyScript, imageFSFeatures)
}

// image makes (or finds) the Debian image with the extra packages and
// returns the path of its disk image.
func (p *provisioner) image(ctx context.Context, extra []string) (string, error) {
	key := imageKey(extra)
	id := hash(key)
	dir := p.path(dirImages, id)
	img := filepath.Join(dir, "root.ext4")
	what := fmt.Sprintf("Debian %s image with %s (mmdebstrap, then mke2fs)", imageSuite, strings.Join(imagePackages(extra), ","))
	err := p.st.run("image-"+id, key, what, func() error {
		p.didWork = true
		if err := removeTree(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		tree := filepath.Join(dir, "root")
		step := "image-" + id
		if err := p.mmdebstrap(ctx, step, imageSuite, tree, imagePackages(extra)); err != nil {
			return err
		}
		if err := customizeImage(tree); err != nil {
			return err
		}
		if err := p.mkfs(ctx, step, tree, img+".tmp"); err != nil {
			return err
		}
		if err := os.Rename(img+".tmp", img); err != nil {
			return err
		}
		// The tree is in the disk image now.
		if err := removeTree(tree); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "packages"), []byte(strings.Join(imagePackages(extra), "\n")+"\n"), 0o644)
	})
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(img); err != nil {
		return "", fmt.Errorf("the Debian image: %w (remove %s to rebuild it)", err, p.st.stampPath("image-"+id))
	}
	return img, nil
}

// customizeImage adds what the guest init needs in the image: hcaemu-ready,
// the mount point of the command's directory.
func customizeImage(tree string) error {
	if os.Geteuid() != 0 {
		if un, ok := subIDRootArgv(); ok {
			// The tree is the subordinate IDs': written as its root.
			cmd := exec.Command(un[0], append(un[1:], "/bin/sh", "-c",
				`mkdir -p "$1/hcaemu" "$1/usr/local/bin" && cat > "$1/usr/local/bin/hcaemu-ready" && chmod 755 "$1/usr/local/bin/hcaemu-ready"`, "sh", tree)...)
			cmd.Stdin = strings.NewReader(imageReadyScript)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("customizing the image: %v: %s", err, out)
			}
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Join(tree, "hcaemu"), 0o755); err != nil {
		return err
	}
	bin := filepath.Join(tree, "usr", "local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bin, "hcaemu-ready"), []byte(imageReadyScript), 0o755)
}

// mkfs writes tree into a read-only ext4 disk image at out, sized to the
// tree with some slack (the guests never write to it: their writes go to a
// tmpfs overlay).
func (p *provisioner) mkfs(ctx context.Context, step, tree, out string) error {
	size, files, err := treeSize(tree)
	if err != nil {
		return err
	}
	// Blocks of 4 KiB, small files rounded up, inodes, metadata: +25 % and
	// 64 MiB.
	kib := (size/1024)*5/4 + 64*1024
	os.Remove(out)
	argv := []string{"mke2fs"}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		// The image's own mke2fs, through its own dynamic loader.
		argv = []string{filepath.Join(tree, "usr", "lib64", "ld-linux-x86-64.so.2"),
			"--library-path", filepath.Join(tree, "usr", "lib", "x86_64-linux-gnu"),
			filepath.Join(tree, "usr", "sbin", "mke2fs")}
	}
	argv = append(argv, "-q", "-F", "-t", "ext4", "-O", imageFSFeatures, "-L", "hcaemu-image",
		"-N", fmt.Sprint(files+files/4+1024), "-E", "root_owner=0:0", "-d", tree, out, fmt.Sprintf("%dK", kib))
	if os.Geteuid() != 0 {
		// The tree belongs to the user's subordinate IDs (mmdebstrap's
		// unshare mode): read it where they are its owners (root is
		// root, /etc/shadow readable), as the image must record them.
		if un, ok := subIDRootArgv(); ok {
			argv = append(un, argv...)
		}
	}
	return p.r.run(ctx, step, "", nil, argv[0], argv[1:]...)
}

// treeSize returns the bytes (rounded up to 4 KiB per file) and the number
// of entries below dir.
func treeSize(dir string) (int64, int64, error) {
	var size, n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && os.Geteuid() != 0 && errors.Is(err, fs.ErrPermission) {
				// A directory of the subordinate IDs' root closed
				// to the user (/root): small, the slack covers it.
				n++
				size += 4096
				return nil
			}
			return err
		}
		n++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += (fi.Size() + 4095) &^ 4095
		} else {
			size += 4096
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, errors.New("empty image tree")
	}
	return size, n, nil
}
