package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// cmdq is the command queue as the driver set it up (spec §2.1): the
// address latched from cmdq_addr_h/l, and the NIC interface state the
// driver writes into cmdq_addr_l_sz's bits 10:8.
type cmdq struct {
	addrH, addrL uint32
	// set: cmdq_addr_l_sz was written since power-on; doorbells before
	// that have no queue to read.
	set      bool
	nicState uint8
}

// setAddrL latches a write of cmdq_addr_l_sz: the queue's low address bits
// (4 KiB aligned) and the NIC interface state; the log sizes are the
// device's and read-only.
func (q *cmdq) setAddrL(v uint32) {
	q.addrL = v & ifc.CmdqAddrLMask
	q.nicState = uint8(v & ifc.NICIfcMask >> ifc.NICIfcShift)
	q.set = true
}

func (q *cmdq) base() uint64 { return uint64(q.addrH)<<32 | uint64(q.addrL) }

// Bounds of what a descriptor may ask (guest-controlled lengths): the
// input must hold the opcode and op_mod words, the output the status and
// syndrome words; neither may be longer than the longest message the
// driver builds.
const (
	minInLen  = 8
	minOutLen = 8
)

// doorbell starts the commands of the slots whose bits are set, lowest
// first (lock held). Each is taken, executed and handed back before the
// next: the driver polls each slot's ownership bit in polling mode.
//
// Event mode (spec §2.5, §12 risk 1): when the command EQ existed at the
// time of this doorbell and still exists once the slots are handed back,
// their bits are OR-ed into one CMD EQE (type 0x0a, data.cmd.vector)
// posted after them. So a command rung before the command EQ existed (the
// CREATE_EQ that creates it) is completed by polling alone, and so is the
// DESTROY_EQ that destroys it (the driver is back in polling mode then).
func (d *Device) doorbell(mask uint32) {
	if !d.cmdq.set {
		d.log.Warn("command doorbell before the command queue's address was written: ignored", "bits", mask)
		d.stats.Unanswered++
		return
	}
	const slots = 1 << LogCmdqSize
	if extra := mask &^ (1<<slots - 1); extra != 0 {
		d.log.Warn("command doorbell bits beyond the queue's slots ignored", "bits", extra)
	}
	cmdEQ := d.fn.cmdEQ
	var done uint32
	for i := range slots {
		if mask&(1<<i) != 0 && d.runSlot(i) {
			done |= 1 << i
		}
	}
	if done != 0 && cmdEQ != nil && cmdEQ == d.fn.cmdEQ {
		d.postCmdEQE(cmdEQ, done)
	}
}

// runSlot takes the descriptor of slot i, executes it and hands it back:
// the status byte (delivery status, ownership bit clear) is the last
// write. It reports whether it answered.
func (d *Device) runSlot(i int) bool {
	slot := d.cmdq.base() + uint64(i)<<LogCmdqStride // a 4 KiB aligned base: no overflow
	var raw [ifc.CmdLayoutSize]byte
	if err := d.readGuest(raw[:], slot); err != nil {
		d.log.Warn("command descriptor unreachable: the driver will time out", "slot", i, "err", err)
		d.stats.Unanswered++
		return false
	}
	lay, _ := ifc.DecodeCmdLayout(raw[:]) // one copy; decided from here on
	if lay.StatusOwn&ifc.CmdOwnerHW == 0 {
		d.log.Warn("command doorbell for a slot software owns: ignored", "slot", i)
		d.stats.Unanswered++
		return false
	}
	d.stats.Commands++
	ds := d.command(&lay, slot)
	if ds == ifc.DeliveryOK {
		d.stats.Delivered++
	} else {
		d.stats.Refused++
		d.log.Warn("command refused", "slot", i, "delivery", ds.String(), "inlen", lay.InLen, "outlen", lay.OutLen)
	}
	if err := d.writeGuest([]byte{byte(ds) << 1}, slot+ifc.CmdLayoutStatusOwn); err != nil {
		d.log.Warn("command status unwritable: the driver will time out", "slot", i, "err", err)
		return false
	}
	return true
}

// command checks a descriptor, gathers its input, executes it and
// scatters its output; it returns the delivery status. Nothing of the
// output is written unless the whole output chain was found good.
func (d *Device) command(lay *ifc.CmdLayout, slot uint64) ifc.DeliveryStatus {
	switch {
	case lay.Type != ifc.PCICmdXport:
		return ifc.DeliveryCmdDescrErr
	case lay.InLen < minInLen || lay.InLen > ifc.MaxCmdMsgSize:
		return ifc.DeliveryInLengthErr
	case lay.OutLen < minOutLen || lay.OutLen > ifc.MaxCmdMsgSize:
		return ifc.DeliveryOutLengthErr
	}
	in := make([]byte, 0, min(lay.InLen, ifc.CmdInlineSize+ifc.CmdDataBlockSize))
	in = append(in, lay.In[:min(lay.InLen, ifc.CmdInlineSize)]...)
	ds := d.walk(lay.InPtr, lay.InLen, lay.Token, false, func(_ uint64, data []byte) {
		in = append(in, data[:min(uint32(len(data)), lay.InLen-uint32(len(in)))]...)
	})
	if ds != ifc.DeliveryOK {
		return ds
	}
	var outBlocks []uint64
	ds = d.walk(lay.OutPtr, lay.OutLen, lay.Token, true, func(gpa uint64, _ []byte) {
		outBlocks = append(outBlocks, gpa)
	})
	if ds != ifc.DeliveryOK {
		return ds
	}
	out := make([]byte, lay.OutLen)
	d.execute(in, out)
	// The whole output, inline part first, then each block's data only:
	// the blocks' control fields stay the driver's.
	if err := d.writeGuest(out[:min(lay.OutLen, ifc.CmdInlineSize)], slot+ifc.CmdLayoutOut); err != nil {
		return ifc.DeliveryFWErr
	}
	rest := out[min(lay.OutLen, ifc.CmdInlineSize):]
	for _, gpa := range outBlocks {
		n := min(len(rest), ifc.CmdDataBlockSize)
		if err := d.writeGuest(rest[:n], gpa); err != nil {
			// Unmapped since the walk: the output is incomplete.
			return ifc.DeliveryOutPtrAlignErr
		}
		rest = rest[n:]
	}
	return ifc.DeliveryOK
}

// walk follows the mailbox chain from ptr that carries the part of a
// message of length n beyond its 16 inline bytes, and calls fn with each
// block's address and data (a copy), in order. The chain is bounded by n,
// never by its own pointers: the driver's cached messages have more blocks
// than they use, with stale contents past the length (spec §2.3). Each
// block the length needs must be 1 KiB aligned (the driver's DMA pool) and
// reachable, must not repeat, must carry its number from the head and the
// descriptor's token (the driver writes both into every block it uses:
// mlx5_alloc_cmd_msg, mlx5_copy_to_msg); a chain that ends early is a
// length error. Signatures are not checked: the driver runs with
// checksums disabled.
func (d *Device) walk(ptr uint64, n uint32, token uint8, output bool, fn func(gpa uint64, data []byte)) ifc.DeliveryStatus {
	ptrErr, lenErr := ifc.DeliveryInPtrAlignErr, ifc.DeliveryInLengthErr
	if output {
		ptrErr, lenErr = ifc.DeliveryOutPtrAlignErr, ifc.DeliveryOutLengthErr
	}
	blocks := ifc.MsgBlocks(n) // at most MaxCmdBlocks: n was bounded
	if blocks == 0 {
		return ifc.DeliveryOK
	}
	seen := make(map[uint64]struct{}, min(blocks, 64))
	var blk [ifc.CmdProtBlockSize]byte
	gpa := ptr
	for k := range blocks {
		switch {
		case gpa == 0:
			return lenErr
		case gpa%ifc.CmdProtBlockAlign != 0:
			return ptrErr
		}
		if _, loop := seen[gpa]; loop {
			return ifc.DeliveryBadBlkNumErr
		}
		seen[gpa] = struct{}{}
		if err := d.readGuest(blk[:], gpa); err != nil {
			return ptrErr
		}
		ctl := ifc.DecodeProtTrailer(blk[ifc.ProtBlockTrailer:])
		switch {
		case ctl.BlockNum != k:
			return ifc.DeliveryBadBlkNumErr
		case ctl.Token != token:
			return ifc.DeliveryTokErr
		}
		fn(gpa, blk[:ifc.CmdDataBlockSize])
		gpa = ctl.Next
	}
	return ifc.DeliveryOK
}
