# hcaemu guest init, run by u-root's gosh as uinit.
# Kernel command line: hcaemu.guest=K hcaemu.ip=A.B.C.D/N hcaemu.server=IP hcaemu.wait=1
# The command is /hcaemu/cmd.sh (from a per-run cpio appended to the initramfs).
# Markers on the console (one per line): HCAEMU-FAIL <what>, HCAEMU-WAIT,
# HCAEMU-STARTED, HCAEMU-EXIT <status>.
export PATH=/bbin:/bin:/usr/bin:/usr/sbin:/sbin
export HOME=/tmp
guest=""
ip=""
server=""
wait=""
for w in $(cat /proc/cmdline); do
	case "$w" in
	hcaemu.guest=*) guest="${w#hcaemu.guest=}" ;;
	hcaemu.ip=*) ip="${w#hcaemu.ip=}" ;;
	hcaemu.server=*) server="${w#hcaemu.server=}" ;;
	hcaemu.wait=1) wait=1 ;;
	esac
done

finish() {
	echo "HCAEMU-EXIT $1"
	sync
	shutdown halt
	sleep 5
	poweroff
}

for m in $(cat /modules/order); do
	if ! insmod /modules/$m.ko; then
		echo "HCAEMU-FAIL insmod $m"
		dmesg | tail -n 20
		finish 125
	fi
done

ip link set dev lo up
if [ -n "$ip" ]; then
	if ! ip addr add "$ip" dev eth0; then
		echo "HCAEMU-FAIL ip addr add $ip dev eth0"
		ip link
		finish 125
	fi
	if ! ip link set dev eth0 up; then
		echo "HCAEMU-FAIL ip link set dev eth0 up"
		finish 125
	fi
fi

export HCAEMU_GUEST="$guest"
export HCAEMU_SERVER_IP="$server"
# Only errors from the kernel from here on, so the console carries the command's output.
echo 3 > /proc/sys/kernel/printk
cd /tmp
export HCAEMU_BOOT=1
if [ "$wait" = 1 ]; then
	echo "HCAEMU-WAIT"
	read go boot
	if [ -n "$boot" ]; then
		export HCAEMU_BOOT="$boot"
	fi
fi
echo "HCAEMU-STARTED"
gosh /hcaemu/cmd.sh < /dev/null
finish $?
