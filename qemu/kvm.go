package qemu

import (
	"encoding/binary"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctl numbers (linux/kvm.h, x86-64).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84
	kvmRun                 = 0xAE80
	kvmExitHLT             = 5
)

// kvmWorks reports whether KVM can actually run guest code: it runs one HLT
// instruction in a throw-away VM. /dev/kvm often exists where nested
// virtualization fails at the first instruction ("KVM internal error").
func kvmWorks() bool {
	res := make(chan bool, 1)
	go func() { res <- kvmProbe() }()
	select {
	case ok := <-res:
		return ok
	case <-time.After(3 * time.Second):
		return false
	}
}

func kvmProbe() bool {
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(kvm)
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return false
	}
	vm, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return false
	}
	defer unix.Close(int(vm))
	mem, err := unix.Mmap(-1, 0, 0x1000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return false
	}
	defer unix.Munmap(mem)
	mem[0] = 0xf4 // hlt
	var region [32]byte
	// slot u32, flags u32, guest_phys_addr u64, memory_size u64, userspace_addr u64
	binary.LittleEndian.PutUint64(region[16:], 0x1000)
	binary.LittleEndian.PutUint64(region[24:], uint64(uintptr(unsafe.Pointer(&mem[0]))))
	if _, err := ioctl(int(vm), kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region[0]))); err != nil {
		return false
	}
	vcpu, err := ioctl(int(vm), kvmCreateVCPU, 0)
	if err != nil {
		return false
	}
	defer unix.Close(int(vcpu))
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil || size < 12 {
		return false
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(run)
	var sregs [312]byte
	if _, err := ioctl(int(vcpu), kvmGetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return false
	}
	// cs is the first struct kvm_segment: base u64 @0, limit u32 @8, selector u16 @12.
	binary.LittleEndian.PutUint64(sregs[0:], 0)
	binary.LittleEndian.PutUint16(sregs[12:], 0)
	if _, err := ioctl(int(vcpu), kvmSetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return false
	}
	var regs [144]byte
	binary.LittleEndian.PutUint64(regs[128:], 0) // rip
	binary.LittleEndian.PutUint64(regs[136:], 2) // rflags
	if _, err := ioctl(int(vcpu), kvmSetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return false
	}
	if _, err := ioctl(int(vcpu), kvmRun, 0); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(run[8:]) == kvmExitHLT
}

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return 0, e
	}
	return r, nil
}
