# hcaemu guest init, run by u-root's gosh as uinit.
# Kernel command line: hcaemu.guest=K hcaemu.ip=A.B.C.D/N hcaemu.server=IP
#   hcaemu.share=TAG:DIR (repeatable: a virtio-9p share to mount)
#   hcaemu.image=1 (a root file system on /dev/vda: the command runs in it)
#   hcaemu.rxe=1 (Linux soft-RoCE: rxe0 over eth0, the guest's RDMA device)
#   hcaemu.mtu=N (eth0's MTU, e.g. 9000 for jumbo frames)
#   hcaemu.device=pvrdma|mlx5|pvrdma,mlx5 (the emulated HCA's model, or both
#     HCAs; pvrdma by default)
#   hcaemu.ipoib=A.B.C.D/N hcaemu.ipoibserver=IP (mlx5: ib0's address, guest 0's)
# The command is /hcaemu/cmd.sh (from a per-run cpio appended to the initramfs).
# Markers on the console (one per line): HCAEMU-FAIL <what>, HCAEMU-WAIT, then,
# after the host's go line "HCAEMU-GO <nonce> <boot> <ready>",
# HCAEMU-STARTED <nonce>, HCAEMU-READY <nonce>, HCAEMU-EXIT <nonce> <status>.
# The nonce is never in the command's environment or files, so the command's
# own output cannot end the run or declare readiness in its name.
export PATH=/bbin:/bin:/usr/bin:/usr/sbin:/sbin
export HOME=/tmp
guest=""
ip=""
server=""
shares=""
image=""
rxe=""
mtu=""
device=pvrdma
ipoib=""
ipoibserver=""
for w in $(cat /proc/cmdline); do
	case "$w" in
	hcaemu.guest=*) guest="${w#hcaemu.guest=}" ;;
	hcaemu.ip=*) ip="${w#hcaemu.ip=}" ;;
	hcaemu.server=*) server="${w#hcaemu.server=}" ;;
	hcaemu.share=*) shares="$shares ${w#hcaemu.share=}" ;;
	hcaemu.image=1) image=/image/root ;;
	hcaemu.rxe=1) rxe=1 ;;
	hcaemu.mtu=*) mtu="${w#hcaemu.mtu=}" ;;
	hcaemu.device=*) device="${w#hcaemu.device=}" ;;
	hcaemu.ipoib=*) ipoib="${w#hcaemu.ipoib=}" ;;
	hcaemu.ipoibserver=*) ipoibserver="${w#hcaemu.ipoibserver=}" ;;
	esac
done

nonce=""
finish() {
	echo "HCAEMU-EXIT $nonce $1"
	sync
	shutdown halt
	sleep 5
	poweroff
}
case "$device" in
pvrdma|mlx5|pvrdma,mlx5) ;;
*)
	echo "HCAEMU-FAIL unknown device model $device (want pvrdma, mlx5 or pvrdma,mlx5)"
	finish 125
	;;
esac

for m in $(cat /modules/order); do
	if [ "$device" = mlx5 ] && [ "$m" = vmw_pvrdma ]; then
		continue # no PVRDMA function in an mlx5 guest
	fi
	if ! insmod /modules/$m.ko; then
		echo "HCAEMU-FAIL insmod $m"
		dmesg | tail -n 20
		finish 125
	fi
done

# /dev/virtio-ports/NAME links, as udev makes them (hcaemu-faults opens
# /dev/virtio-ports/org.hcaemu.faults, else finds its port in sysfs itself).
for p in /sys/class/virtio-ports/*; do
	if [ -e "$p/name" ]; then
		name=$(cat "$p/name")
		if [ -n "$name" ]; then
			mkdir -p /dev/virtio-ports
			ln -s "../${p##*/}" "/dev/virtio-ports/$name"
		fi
	fi
done

ip link set dev lo up
if [ -n "$ip" ]; then
	if ! ip addr add "$ip" dev eth0; then
		echo "HCAEMU-FAIL ip addr add $ip dev eth0"
		ip link
		finish 125
	fi
	if [ -n "$mtu" ] && ! ip link set dev eth0 mtu "$mtu"; then
		echo "HCAEMU-FAIL ip link set dev eth0 mtu $mtu"
		finish 125
	fi
	if ! ip link set dev eth0 up; then
		echo "HCAEMU-FAIL ip link set dev eth0 up"
		finish 125
	fi
fi
# The guest's RDMA device: soft-RoCE on request, else the emulated HCA
# (vmw_pvrdma0 when the guest has both).
dev=vmw_pvrdma0
if [ -n "$rxe" ]; then
	dev=rxe0
	if ! rdma link add rxe0 type rxe netdev eth0; then
		echo "HCAEMU-FAIL rdma link add rxe0 type rxe netdev eth0"
		dmesg | tail -n 20
		finish 125
	fi
elif [ "$device" != pvrdma ]; then
	# An emulated ConnectX-4 with an InfiniBand port: mlx5_core probes the
	# PCI function, mlx5_ib makes mlx5_0 of it, ib_ipoib ib0 on its port.
	if [ "$device" = mlx5 ]; then
		dev=mlx5_0
	fi
	mlx5fail() {
		echo "HCAEMU-FAIL $1"
		loaded=""
		for m in $(cat /modules/order.mlx5); do
			if [ -d "/sys/module/${m//-/_}" ]; then
				loaded="$loaded $m"
			fi
		done
		echo "hcaemu-init: mlx5 modules loaded:$loaded"
		dmesg | tail -n 20
		finish 125
	}
	for m in $(cat /modules/order.mlx5); do
		# (loaded already when the run's own module order has it)
		if [ ! -d "/sys/module/${m//-/_}" ] && ! insmod /modules/$m.ko; then
			mlx5fail "insmod $m"
		fi
	done
	# Bounded waits, polled (the probes are synchronous in 6.12, but a
	# deferred one finishes after insmod returns).
	fn=""
	for d in /sys/bus/pci/devices/*; do
		if [ "$(cat $d/vendor)" = 0x15b3 ]; then
			fn="${d##*/}"
		fi
	done
	if [ -z "$fn" ]; then
		mlx5fail "no mlx5_0: no Mellanox (15b3) PCI function in the guest"
	fi
	n=0
	while [ ! -e /sys/class/infiniband/mlx5_0 ]; do
		if [ $n -ge 600 ]; then
			mlx5fail "no mlx5_0 60 s after loading mlx5_core and mlx5_ib (PCI function $fn)"
		fi
		if [ $n -ge 50 ] && [ ! -e /sys/bus/pci/devices/$fn/driver ]; then
			mlx5fail "no mlx5_0: mlx5_core has not bound PCI function $fn (its probe failed)"
		fi
		# mlx5_core made its auxiliary RDMA device and mlx5_ib's probe of
		# it failed.
		for a in /sys/bus/auxiliary/devices/mlx5_core.rdma.*; do
			if [ $n -ge 50 ] && [ -e "$a" ] && [ ! -e "$a/driver" ]; then
				mlx5fail "no mlx5_0: mlx5_ib has not bound ${a##*/} (its probe failed)"
			fi
		done
		sleep 0.1
		n=$((n+1))
	done
	n=0
	while [ ! -e /sys/class/net/ib0 ]; do
		if [ $n -ge 300 ]; then
			mlx5fail "no ib0 30 s after mlx5_0 appeared"
		fi
		sleep 0.1
		n=$((n+1))
	done
	if [ -n "$ipoib" ] && ! ip addr add "$ipoib" dev ib0; then
		mlx5fail "ip addr add $ipoib dev ib0"
	fi
	if ! ip link set dev ib0 up; then
		mlx5fail "ip link set dev ib0 up"
	fi
fi

# The image: read-only ext4 on the virtio disk under a tmpfs overlay (the
# guest's writes stay in RAM), with /proc, /sys, /dev, /tmp and the command's
# directory of the initramfs bound in. Shares are mounted inside it.
if [ -n "$image" ]; then
	for m in $(cat /modules/order.image); do
		# (an --ulp module's dependency may be loaded already)
		if [ ! -d /sys/module/$m ] && ! insmod /modules/$m.ko; then
			echo "HCAEMU-FAIL insmod $m"
			dmesg | tail -n 20
			finish 125
		fi
	done
	mkdir -p /image/ro /image/rw "$image"
	if ! mount -r -t ext4 /dev/vda /image/ro; then
		echo "HCAEMU-FAIL mount -t ext4 /dev/vda"
		dmesg | tail -n 20
		finish 125
	fi
	mount -t tmpfs -o mode=0755 tmpfs /image/rw
	mkdir -p /image/rw/upper /image/rw/work
	if ! mount -t overlay -o lowerdir=/image/ro,upperdir=/image/rw/upper,workdir=/image/rw/work overlay "$image"; then
		echo "HCAEMU-FAIL mount -t overlay $image"
		dmesg | tail -n 20
		finish 125
	fi
	mount -t proc proc "$image/proc"
	mount -t sysfs sysfs "$image/sys"
	for d in /dev /dev/pts /tmp /hcaemu; do
		if [ -d "$d" ]; then
			mkdir -p "$image$d"
			# -t: u-root's mount probes block file systems without one.
			if ! mount -t none -o bind "$d" "$image$d"; then
				echo "HCAEMU-FAIL mount -o bind $d $image$d"
				finish 125
			fi
		fi
	done
	# hcaemu-faults (static) is in the image's PATH too.
	if [ -e /bin/hcaemu-faults ]; then
		: > "$image/usr/local/bin/hcaemu-faults"
		mount -t none -o bind /bin/hcaemu-faults "$image/usr/local/bin/hcaemu-faults"
	fi
fi

for s in $shares; do
	tag="${s%%:*}"
	dir="$image${s#*:}"
	mkdir -p "$dir"
	if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 "$tag" "$dir"; then
		echo "HCAEMU-FAIL mount -t 9p $tag $dir"
		dmesg | tail -n 20
		finish 125
	fi
done

# A guest with an emulated HCA has its IB device once the driver's probe is
# done; when it has none, show what the driver said (a probe that failed).
if [ -z "$rxe" ] && [ "$device" != mlx5 ] && [ ! -e /sys/class/infiniband/vmw_pvrdma0 ]; then
	echo "hcaemu-init: no vmw_pvrdma0 after loading the modules; the kernel said:"
	dmesg | grep -i -e pvrdma -e vmxnet -e infiniband -e rdma | tail -n 20
fi

export HCAEMU_GUEST="$guest"
export HCAEMU_SERVER_IP="$server"
export HCAEMU_RDMA_DEV="$dev"
if [ "$device" != pvrdma ]; then
	export HCAEMU_SERVER_IPOIB="$ipoibserver"
fi
# Only errors from the kernel from here on, so the console carries the command's output.
echo 3 > /proc/sys/kernel/printk
cd /tmp

# listeners prints the listening sockets: TCP (state 0A in /proc/net/tcp*,
# by inode) and rdma_cm listeners (rdma resource show cm_id).
listeners() {
	for f in /proc/net/tcp /proc/net/tcp6; do
		while read -r sl local rem st queues timer retr uid tmo inode rest; do
			if [ "$st" = 0A ]; then
				echo "tcp:$local:$inode"
			fi
		done < $f
	done
	rdma resource show cm_id 2>/dev/null | while read -r line; do
		case "$line" in
		*"state LISTEN"*) echo "cm:${line// /_}" ;;
		esac
	done
}

# watch prints the ready marker once the command is ready: a listening
# socket not in $before (taken before the command started: listen mode), or
# the /tmp/.hcaemu-ready file hcaemu-ready creates (both modes).
watch() {
	mode=$1
	while [ ! -e /tmp/.hcaemu-done ]; do
		if [ -e /tmp/.hcaemu-ready ]; then
			echo "HCAEMU-READY $nonce"
			return
		fi
		if [ "$mode" = listen ]; then
			for l in $(listeners); do
				case "$before" in
				*" $l "*) ;;
				*)
					echo "HCAEMU-READY $nonce"
					return
					;;
				esac
			done
		fi
		sleep 0.2
	done
}

echo "HCAEMU-WAIT"
read go nonce boot ready
export HCAEMU_BOOT="$boot"
rm -f /tmp/.hcaemu-ready /tmp/.hcaemu-done
before=" "
case "$ready" in
listen|marker)
	if [ "$ready" = listen ]; then
		for l in $(listeners); do
			before="$before$l "
		done
	fi
	watch "$ready" &
	;;
esac
echo "HCAEMU-STARTED $nonce"
if [ -n "$image" ]; then
	# u-root's chroot exits 1 whatever the command's status: the status
	# comes back through a file. The command's environment is Debian's,
	# with every HCAEMU_ variable exported above (TestInitImageEnv).
	rm -f /tmp/.hcaemu-status
	chroot "$image" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 TERM=dumb HCAEMU_GUEST="$HCAEMU_GUEST" HCAEMU_SERVER_IP="$HCAEMU_SERVER_IP" \
		HCAEMU_RDMA_DEV="$HCAEMU_RDMA_DEV" ${HCAEMU_SERVER_IPOIB+HCAEMU_SERVER_IPOIB=$HCAEMU_SERVER_IPOIB} \
		HCAEMU_BOOT="$HCAEMU_BOOT" /bin/sh -c 'cd /tmp; /bin/bash /hcaemu/cmd.sh; echo $? > /tmp/.hcaemu-status' < /dev/null
	st=125
	if [ -e /tmp/.hcaemu-status ]; then
		st=$(cat /tmp/.hcaemu-status)
	fi
else
	gosh /hcaemu/cmd.sh < /dev/null
	st=$?
fi
: > /tmp/.hcaemu-done
finish $st
