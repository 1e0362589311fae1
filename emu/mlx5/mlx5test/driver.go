// Package mlx5test is a fake mlx5_core: it drives an emulated ConnectX
// function through its PCI regions and a flat guest RAM the way the Linux
// driver does (core/cmd.c: the command queue, mailbox chains, tokens,
// polling the ownership bit, then completions by CMD EQE in event mode;
// core/main.c and core/eq.c: the probe to the end of mlx5_load — function
// enable and open, the capabilities read and set as the driver does, init
// once, the UAR and the async EQs — and the unload), failing where the
// driver would on a wrong answer, and lets a test post descriptors and
// chains the driver never would.
package mlx5test

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/mmio"
)

var be = binary.BigEndian

// Function is the device side the driver talks to (mlx5.Device satisfies
// it).
type Function interface {
	ReadRegion(index int, off uint64, p []byte) error
	WriteRegion(index int, off uint64, p []byte) error
}

// Driver is the fake driver of one function.
type Driver struct {
	F   Function
	Mem *dma.Flat
	// Queue is the command queue's address once Enable wrote it; LogSize
	// and LogStride are what the device offered in cmdq_addr_l_sz.
	Queue              uint64
	LogSize, LogStride uint32
	// FWRev and CmdIfRevFWSub are the registers as Enable read them.
	FWRev, CmdIfRevFWSub uint32

	next  uint64 // bump allocator in Mem
	token uint8
	// mkeyVariant is the last mkey variant handed out (assign_mkey_variant).
	mkeyVariant uint8

	// What the probe learned and set up (probe.go).
	Probed
}

// New returns a driver for f with guest RAM mem, and enables memory decode
// and bus mastering as pci_enable_device and pci_set_master do.
func New(f Function, mem *dma.Flat) *Driver {
	d := &Driver{F: f, Mem: mem, next: mem.Base}
	var cmd [2]byte
	binary.LittleEndian.PutUint16(cmd[:], mmio.CmdMemory|mmio.CmdBusMaster)
	f.WriteRegion(mmio.RegionConfig, mmio.CfgCommand, cmd[:])
	return d
}

// Read32 reads a big-endian BAR0 register (ioread32be).
func (d *Driver) Read32(off uint64) uint32 {
	var b [4]byte
	if err := d.F.ReadRegion(mmio.RegionBAR0, off, b[:]); err != nil {
		panic(err)
	}
	return be.Uint32(b[:])
}

// Write32 writes a big-endian BAR0 register (iowrite32be).
func (d *Driver) Write32(off uint64, v uint32) {
	var b [4]byte
	be.PutUint32(b[:], v)
	if err := d.F.WriteRegion(mmio.RegionBAR0, off, b[:]); err != nil {
		panic(err)
	}
}

// Alloc returns size zeroed bytes of guest RAM aligned to align (a power
// of two); it panics when RAM runs out.
func (d *Driver) Alloc(size, align uint64) uint64 {
	gpa := (d.next + align - 1) &^ (align - 1)
	if gpa+size > d.Mem.Base+uint64(len(d.Mem.Mem)) {
		panic(fmt.Sprintf("mlx5test: guest RAM exhausted allocating %d bytes", size))
	}
	d.next = gpa + size
	clear(d.Mem.Mem[gpa-d.Mem.Base : gpa-d.Mem.Base+size])
	return gpa
}

// Bytes is guest RAM at [gpa, gpa+n).
func (d *Driver) Bytes(gpa uint64, n int) []byte {
	off := gpa - d.Mem.Base
	return d.Mem.Mem[off : off+uint64(n)]
}

// maxInitPolls bounds wait_fw_init: the driver polls every 2 ms for up to
// 120 s; a fake driver gives up sooner.
const maxInitPolls = 1000

// Enable does what mlx5_function_enable does before its first command:
// reads the firmware and command interface revisions (the latter must be
// 5), waits for initializing to clear, reads the queue's geometry, checks
// it as mlx5_cmd_enable does, writes the address of a fresh 4 KiB page,
// waits for initializing again and checks the embedded-CPU bit.
func (d *Driver) Enable() error {
	d.FWRev = d.Read32(ifc.InitSegFWRev)
	d.CmdIfRevFWSub = d.Read32(ifc.InitSegCmdIfRevFWSub)
	if rev := d.CmdIfRevFWSub >> ifc.CmdIfRevShift; rev != ifc.CmdIfRev {
		return fmt.Errorf("Driver cmdif rev(%d) differs from firmware's(%d)", ifc.CmdIfRev, rev)
	}
	if err := d.waitInit("pre-initializing"); err != nil {
		return err
	}
	lsz := d.Read32(ifc.InitSegCmdqAddrLSz)
	d.LogSize = lsz & ifc.LogCmdqSizeMask >> ifc.LogCmdqSizeShift
	d.LogStride = lsz & ifc.LogCmdqStrideMask
	if 1<<d.LogSize > 32 {
		return fmt.Errorf("firmware reports too many outstanding commands %d", 1<<d.LogSize)
	}
	if d.LogSize+d.LogStride > 12 {
		return fmt.Errorf("command queue size overflow")
	}
	if d.LogSize == 0 {
		return fmt.Errorf("command queue of one slot: every command would time out")
	}
	d.Queue = d.Alloc(4096, 4096)
	d.Write32(ifc.InitSegCmdqAddrH, uint32(d.Queue>>32))
	d.Write32(ifc.InitSegCmdqAddrLSz, uint32(d.Queue))
	if err := d.waitInit("initializing"); err != nil {
		return err
	}
	if d.Read32(ifc.InitSegInitializing)&ifc.EmbeddedCPUBit != 0 {
		return fmt.Errorf("embedded CPU function")
	}
	return nil
}

func (d *Driver) waitInit(what string) error {
	for range maxInitPolls {
		if d.Read32(ifc.InitSegInitializing)&ifc.InitializingBit == 0 {
			return nil
		}
	}
	return fmt.Errorf("firmware over %d polls in %s state", maxInitPolls, what)
}

// Msg allocates the mailbox chain of a message of n bytes as
// mlx5_alloc_cmd_msg does: one 576-byte block per 512 bytes beyond the
// inline 16, from a pool aligned to 1 KiB, numbered from the head, each
// carrying the token. It returns the head (0 for none) and the blocks.
func (d *Driver) Msg(n uint32, token uint8) (head uint64, blocks []uint64) {
	nb := ifc.MsgBlocks(n)
	blocks = make([]uint64, nb)
	for i := range blocks {
		blocks[i] = d.Alloc(ifc.CmdProtBlockSize, ifc.CmdProtBlockAlign)
	}
	for i, gpa := range blocks {
		p := ifc.CmdProtBlock{BlockNum: uint32(i), Token: token}
		if i+1 < len(blocks) {
			p.Next = blocks[i+1]
		}
		p.Encode(d.Bytes(gpa, ifc.CmdProtBlockSize))
	}
	if nb > 0 {
		head = blocks[0]
	}
	return head, blocks
}

// Token returns the next command token, never 0 (alloc_token).
func (d *Driver) Token() uint8 {
	d.token++
	if d.token == 0 {
		d.token++
	}
	return d.token
}

// Slot is the address of slot i.
func (d *Driver) Slot(i int) uint64 { return d.Queue + uint64(i)<<d.LogStride }

// Post writes lay into slot i with the ownership bit set, rings the slot's
// doorbell and returns the descriptor as the device left it. The device
// answers within the doorbell write, so one poll of the ownership bit
// tells whether it answered at all.
func (d *Driver) Post(i int, lay ifc.CmdLayout) ifc.CmdLayout {
	lay.StatusOwn |= ifc.CmdOwnerHW
	lay.Encode(d.Bytes(d.Slot(i), ifc.CmdLayoutSize))
	d.Write32(ifc.InitSegCmdDbell, 1<<i)
	got, _ := ifc.DecodeCmdLayout(d.Bytes(d.Slot(i), ifc.CmdLayoutSize))
	return got
}

// Scatter copies msg into a descriptor's inline bytes and its chain
// (mlx5_copy_to_msg).
func (d *Driver) Scatter(inline []byte, blocks []uint64, msg []byte) {
	n := copy(inline, msg)
	msg = msg[n:]
	for _, gpa := range blocks {
		n := copy(d.Bytes(gpa, ifc.CmdDataBlockSize), msg)
		msg = msg[n:]
	}
}

// Gather copies a message of n bytes out of a descriptor's inline bytes and
// a chain (mlx5_copy_from_msg).
func (d *Driver) Gather(inline []byte, blocks []uint64, n int) []byte {
	msg := make([]byte, 0, n)
	msg = append(msg, inline[:min(n, len(inline))]...)
	for _, gpa := range blocks {
		msg = append(msg, d.Bytes(gpa, ifc.CmdDataBlockSize)[:min(n-len(msg), ifc.CmdDataBlockSize)]...)
	}
	return msg
}

// Exec runs one command in slot 0 as cmd_exec does and returns its output
// and the error the driver would return: a descriptor still owned by the
// device is a timeout; in event mode so is a command whose CMD EQE never
// came, and in polling mode a CMD EQE for it is the driver's "completion
// arrived after timeout"; a delivery status other than OK fails the
// command before its status is looked at, and a command status other than
// OK is the driver's "failed, status ..., syndrome ..." error.
func (d *Driver) Exec(in []byte, outLen uint32) (out []byte, err error) {
	token := d.Token()
	inHead, inBlocks := d.Msg(uint32(len(in)), token)
	outHead, outBlocks := d.Msg(outLen, token)
	lay := ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: uint32(len(in)), InPtr: inHead,
		OutPtr: outHead, OutLen: outLen, Token: token}
	d.Scatter(lay.In[:], inBlocks, in)
	cmdEQ := d.CmdEQ
	got := d.Post(0, lay)
	if got.StatusOwn&ifc.CmdOwnerHW != 0 {
		return nil, fmt.Errorf("command timeout: slot 0 still owned by the device")
	}
	if err := d.completion(cmdEQ, 0); err != nil {
		return nil, err
	}
	if ds := got.DeliveryStatus(); ds != ifc.DeliveryOK {
		return nil, &DeliveryError{ds}
	}
	out = d.Gather(got.Out[:], outBlocks, int(outLen))
	if st := ifc.Status(ifc.MboxOutStatus.Get(out)); st != ifc.StatOK {
		op := ifc.Opcode(ifc.MboxInOpcode.Get(in))
		return out, &CmdError{Op: op, OpMod: uint16(ifc.MboxInOpMod.Get(in)), Status: st,
			Syndrome: ifc.MboxOutSyndrome.Get(out)}
	}
	return out, nil
}

// CmdError is a command that failed with a status (mlx5_cmd_out_err).
type CmdError struct {
	Op       ifc.Opcode
	OpMod    uint16
	Status   ifc.Status
	Syndrome uint32
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x)",
		e.Op, uint16(e.Op), e.OpMod, e.Status, uint8(e.Status), e.Syndrome)
}

// DeliveryError is a command the device refused to take or hand back: the
// driver fails it with the errno of its delivery status
// (core/cmd.c: deliv_status_to_err) before it looks at the output.
type DeliveryError struct{ Status ifc.DeliveryStatus }

// Errno is the driver's error for the delivery status.
func (e *DeliveryError) Errno() syscall.Errno {
	switch e.Status {
	case ifc.DeliverySignatErr, ifc.DeliveryTokErr:
		return syscall.EBADR
	case ifc.DeliveryBadBlkNumErr, ifc.DeliveryOutPtrAlignErr, ifc.DeliveryInPtrAlignErr:
		return syscall.EFAULT
	case ifc.DeliveryInLengthErr, ifc.DeliveryOutLengthErr, ifc.DeliveryCmdDescrErr, ifc.DeliveryResFldNotClrErr:
		return syscall.ENOMSG
	case ifc.DeliveryFWErr:
		return syscall.EIO
	}
	return syscall.EINVAL
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("delivery status %s(%#x): %v", e.Status, uint8(e.Status), e.Errno())
}
