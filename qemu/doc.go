// Package qemu provisions a QEMU with vfio-user-pci, a Debian guest kernel
// with the unmodified vmw_pvrdma driver and a u-root initramfs with rdma-core
// and perftest, and boots guests that run one command each.
//
// Provision is cached and idempotent. Cache layout (default $HCAEMU_CACHE,
// else /var/cache/hcaemu for root, else /var/cache/hcaemu read-only when it
// is complete, else $XDG_CACHE_HOME/hcaemu: SelectCache):
//
//	lock                 flock: one provisioning at a time (shared: used read-only)
//	runs.lock            flock shared by every run (CleanCache refuses meanwhile)
//	stamps/STEP          a step is done when its stamp holds the step's key
//	logs/STEP.log        full output of each step's commands
//	tools/mmdebstrap/    mmdebstrap, from `apt-get download` + `dpkg-deb -x`
//	sid/                 Debian sid root: QEMU (>= 10.1), rdma-core, perftest
//	trixie/              Debian trixie root: kernel, headers, source, gcc-14
//	guest/vmlinuz        the guest kernel (trixie's)
//	guest/modules/       *.ko (decompressed), order (the load order), order.image and
//	                     order.mlx5 (what an image, an mlx5 guest load after it)
//	guest/vmw_pvrdma-debug.ko   the driver with debug info (for pahole)
//	guest/initramfs.cpio the base initramfs
//	guest/hcaemu-initramfs  the archive builder (mkuimage; writes each run's initrd)
//	gomod/               Go module (u-root pinned) the busybox and the builder are built in
//	accel                cached KVM boot probe (per host boot)
//	run/ID/              one run (0700): switch.net, gK.net, hcaK.sock, initrd.cpio
//
// A cache complete but not writable by the user is used read-only
// (Env.CacheDir); accel, runs.lock, run/ and the images it lacks go to the
// user's own cache (Env.WorkDir), bound at the same path in QEMU's root. An
// unprivileged user provisions with mmdebstrap's unshare mode (the roots
// then belong to the user's subordinate IDs; CleanCache removes them in a
// user namespace that maps those) and enters roots with unshare
// --map-root-user; a bind target they may not create in a root (/home in a
// root of subordinate IDs or of root) is made on a tmpfs.
//
// The steps are: tools, sid, trixie, modules (build vmw_pvrdma.ko in the
// trixie root, collect kernel and modules), initramfs (build the archive
// builder hcaemu-initramfs from guestmod/ in the guest module, then run it:
// u-root busybox built with mkuimage, plus the sid root's programs with their
// libraries resolved from the ELF headers). hcaemu itself links nothing of
// u-root: the builder is a separate program, also used per run to append the
// command's archive. Bumping a recipe version or changing an input redoes
// the step and every step after it.
//
// Guests: QEMU runs inside the sid root (unshare --mount, chroot, the cache
// bound at the same path), TCG unless a probe guest boots with KVM (or
// HCAEMU_ACCEL says). All guests share one Ethernet segment, a fabric.Switch
// in the calling process (the HCAs' too, when the caller gives its own),
// each guest's NIC over a unix stream socket of its own (QEMU -netdev
// stream), so nothing reaches any network. The guest init (init.sh, run by gosh) loads the
// modules in order, configures eth0 from the kernel command line (for an
// mlx5 guest, Cluster.Model, also loads mlx5_core, mlx5_ib and ib_ipoib,
// waits for mlx5_0 and gives ib0 its address in the IPoIB subnet), mounts
// the virtio-9p shares, and runs /hcaemu/cmd.sh (from a small cpio appended
// to the initramfs per run), framing it with markers on the serial console:
// HCAEMU-WAIT (every guest then waits for the go line "HCAEMU-GO <nonce>
// <boot> <readiness>" on the console: guest 0 gets it at once, the others
// once guest 0's command is ready), HCAEMU-STARTED <nonce>, HCAEMU-READY
// <nonce> (guest 0's init saw a new TCP or rdma_cm listener, or the command
// ran hcaemu-ready), HCAEMU-EXIT <nonce> <status>, HCAEMU-FAIL <what>. The
// nonce is fresh per run and stays in the init's unexported shell variables,
// so the command's own output cannot forge an exit.
package qemu
