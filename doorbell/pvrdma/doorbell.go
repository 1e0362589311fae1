// Package pvrdma decodes writes to the PVRDMA UAR (BAR2): the doorbells by
// which the kernel driver and user processes tell the device that a queue
// pair, completion queue or shared receive queue has new work or wants an
// interrupt. Each 4 KiB UAR page belongs to one user context (page 0 to the
// kernel); within a page, offset 0x0 is the QP doorbell, 0x4 the CQ doorbell
// and 0x8 the SRQ doorbell.
//
// Importers name it doorbell, the concept it holds for its model: another
// model's doorbells sit beside it (doorbell/<model>).
package pvrdma

// Kind says which object a doorbell names.
type Kind uint8

const (
	QP Kind = iota + 1
	CQ
	SRQ
)

func (k Kind) String() string {
	switch k {
	case QP:
		return "QP"
	case CQ:
		return "CQ"
	case SRQ:
		return "SRQ"
	}
	return "unknown"
}

// Value bits.
const (
	HandleMask = 0xFFFFFF

	QPSend = 1 << 30
	QPRecv = 1 << 31

	CQArmSol = 1 << 29
	CQArm    = 1 << 30
	CQPoll   = 1 << 31

	SRQRecv = 1 << 30
)

// PageSize is the size of one UAR page.
const PageSize = 4096

// Doorbell is one decoded UAR write.
type Doorbell struct {
	Page   uint32 // UAR index: 0 kernel, else the user context's page
	Kind   Kind
	Handle uint32
	Flags  uint32 // the value's bits above the handle
}

// Decode decodes a write of value at offset off of the UAR BAR. Only aligned
// 4-byte writes at offsets 0, 4 and 8 of a page are doorbells; anything else
// returns ok=false and is to be ignored.
func Decode(off uint64, size int, value uint32) (d Doorbell, ok bool) {
	if size != 4 || off&3 != 0 || off>>12 > 0xFFFFFFFF {
		return d, false
	}
	d.Page = uint32(off >> 12)
	switch off & (PageSize - 1) {
	case 0x0:
		d.Kind = QP
	case 0x4:
		d.Kind = CQ
	case 0x8:
		d.Kind = SRQ
	default:
		return d, false
	}
	d.Handle = value & HandleMask
	d.Flags = value &^ HandleMask
	return d, true
}
