package mlx5

// Kind says which register a doorbell was written to.
type Kind uint8

// Doorbell registers.
const (
	KindSend  Kind = iota + 1 // 0x800-0xfff
	KindCQArm                 // 0x20
)

func (k Kind) String() string {
	switch k {
	case KindSend:
		return "send"
	case KindCQArm:
		return "CQ arm"
	}
	return "unknown"
}

// Doorbell is a whole 64-bit doorbell written to a UAR page register.
type Doorbell struct {
	Kind   Kind
	Offset uint16  // the register's offset in its UAR page
	Value  [8]byte // as it sits in the register: word 0 at +0, word 1 at +4
}

// Send decodes a KindSend doorbell.
func (d Doorbell) Send() Send { return DecodeSend(d.Value) }

// CQArm decodes a KindCQArm doorbell.
func (d Doorbell) CQArm() CQArm { return DecodeCQArm(d.Value) }

// Register reports the doorbell register at offset off of a UAR page (off
// 8-aligned): the CQ arm register and the 256 BlueFlame registers.
func Register(off uint64) (Kind, bool) {
	switch {
	case off == CQDoorbell:
		return KindCQArm, true
	case off >= SendDoorbellStart && off < SendDoorbellEnd && off%8 == 0:
		return KindSend, true
	}
	return 0, false
}

// numRegs is the number of doorbell registers of a page: the CQ arm
// register (slot 0) and the BlueFlame registers.
const numRegs = 1 + (SendDoorbellEnd-SendDoorbellStart)/8

func slot(off uint64) int {
	if off == CQDoorbell {
		return 0
	}
	return 1 + int(off-SendDoorbellStart)/8
}

// Latch assembles the 64-bit doorbells of one UAR page from the writes the
// guest makes to it: one 8-byte write, or two 4-byte writes, the word at +0
// and the word at +4, in either order (a vfio-user client may split an
// 8-byte store; mlx5.md §7.4, §12 point 8). Its memory is fixed (one
// pending half per register), so a guest gains nothing by leaving halves
// behind; the page's owner is the only one its stray halves can confuse,
// and the device treats every doorbell as a hint, re-reading the doorbell
// record.
//
// Defined behaviour:
//   - an 8-byte write at a register is a doorbell; a half pending there is
//     dropped (Discarded);
//   - a 4-byte write completes a doorbell when the other half of the same
//     register is pending (the two halves written, in either order);
//   - otherwise it is held; a later 4-byte write of the same half replaces
//     it (Replaced: the doorbell is made of the latest halves), so a second
//     high half before any low half is held, not a doorbell;
//   - any other write (another size, unaligned, outside the doorbell
//     registers) is no doorbell and changes nothing (Ignored);
//   - Reset drops every pending half (device reset, page unmapped).
//
// A Latch is not safe for concurrent use: the device holds its lock.
type Latch struct {
	regs [numRegs]struct {
		v   [8]byte
		has uint8 // 1: word at +0 pending, 2: word at +4 pending
	}
	Stats LatchStats
}

// LatchStats count the writes that made no doorbell.
type LatchStats struct {
	Replaced  uint64 // a pending half replaced by another of the same half
	Discarded uint64 // a pending half dropped by an 8-byte write
	Ignored   uint64 // writes to no register, of the wrong size or alignment
}

// Write takes a write of data at offset off of the Latch's UAR page and
// returns the doorbell it completes, if any.
func (l *Latch) Write(off uint64, data []byte) (Doorbell, bool) {
	reg := off &^ 7
	kind, ok := Register(reg)
	if !ok || off >= UARPageSize || (len(data) != 4 && len(data) != 8) || off%uint64(len(data)) != 0 {
		l.Stats.Ignored++
		return Doorbell{}, false
	}
	r := &l.regs[slot(reg)]
	d := Doorbell{Kind: kind, Offset: uint16(reg)}
	if len(data) == 8 {
		if r.has != 0 {
			l.Stats.Discarded++
		}
		r.has = 0
		copy(d.Value[:], data)
		return d, true
	}
	half := uint8(1)
	if off&4 != 0 {
		half = 2
	}
	copy(r.v[off&4:off&4+4], data)
	if r.has|half == 3 {
		d.Value = r.v
		r.has = 0
		return d, true
	}
	if r.has == half {
		l.Stats.Replaced++
	}
	r.has = half
	return Doorbell{}, false
}

// Pending reports whether a half is held at register off.
func (l *Latch) Pending(off uint64) bool {
	if _, ok := Register(off); !ok {
		return false
	}
	return l.regs[slot(off)].has != 0
}

// Reset drops every pending half.
func (l *Latch) Reset() {
	for i := range l.regs {
		l.regs[i].has = 0
	}
}
