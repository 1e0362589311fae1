# NVMe-oF over RDMA between two guests, sourced by the tests' guest
# scripts (software/run.sh for PVRDMA, software/mlx5.sh for mlx5); each
# step prints "STEP <name> <exit status>" (the caller's step function).
#
# nvme_target ADDR: the target on ADDR (the address rdma_cm listens on),
# port 4420: subsystem "hcaemu", any host, a 64 MiB file-backed namespace.
nvme_target() {
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	local n=/sys/kernel/config/nvmet
	mkdir $n/subsystems/hcaemu &&
		echo 1 > $n/subsystems/hcaemu/attr_allow_any_host &&
		mkdir $n/subsystems/hcaemu/namespaces/1 &&
		truncate -s 64M /tmp/nvme.img &&
		echo -n /tmp/nvme.img > $n/subsystems/hcaemu/namespaces/1/device_path &&
		echo 1 > $n/subsystems/hcaemu/namespaces/1/buffered_io &&
		echo 1 > $n/subsystems/hcaemu/namespaces/1/enable &&
		mkdir $n/ports/1 &&
		echo rdma > $n/ports/1/addr_trtype &&
		echo ipv4 > $n/ports/1/addr_adrfam &&
		echo "$1" > $n/ports/1/addr_traddr &&
		echo 4420 > $n/ports/1/addr_trsvcid &&
		ln -s $n/subsystems/hcaemu $n/ports/1/subsystems/hcaemu
	step nvmet $?
}

# nvme_host ADDR: connects to the target at ADDR, writes 16 MiB of random
# data through the block device with O_DIRECT, reads it back, prints both
# SHA-256 sums ("NVME-SUMS want got"), disconnects.
nvme_host() {
	nvme connect -t rdma -a "$1" -s 4420 -n hcaemu
	step nvme-connect $?
	local i=0
	while [ ! -b /dev/nvme0n1 ] && [ $i -lt 600 ]; do
		i=$((i + 1))
		sleep 0.1
	done
	head -c $((16 << 20)) /dev/urandom > /tmp/data
	dd if=/tmp/data of=/dev/nvme0n1 bs=1M oflag=direct status=none
	step nvme-write $?
	dd if=/dev/nvme0n1 of=/tmp/back bs=1M count=16 iflag=direct status=none
	step nvme-read $?
	echo "NVME-SUMS $(sha256sum < /tmp/data | cut -c1-64) $(sha256sum < /tmp/back | cut -c1-64)"
	nvme disconnect -n hcaemu
	step nvme-disconnect $?
}
