// Package mlx5 holds the ConnectX (mlx5) doorbells: the doorbell records
// software keeps in host memory (a QP's receive and send counters, an SRQ's
// post counter, a CQ's consumer index and last arm command) and the UAR page
// registers of BAR0 it writes (the send doorbell, the first 8 bytes of a
// WQE's control segment, anywhere in 0x800-0xfff; the CQ arm doorbell at
// 0x20), with a Latch that assembles a 64-bit doorbell written as two 32-bit
// halves. EQ doorbells (0x40, 0x48) are not here.
//
// Names follow include/linux/mlx5 (qp.h, cq.h, doorbell.h) and mlx5dv.h,
// spelled as Go does. Importers name it doorbell, beside doorbell/pvrdma.
// Everything is big-endian; standard library only.
package mlx5

import "encoding/binary"

var be = binary.BigEndian

// Doorbell records (mlx5.md §7.3): 8 bytes, big-endian 32-bit words.
const (
	RecordSize = 8
	// QP record words (qp.h MLX5_RCV_DBR, MLX5_SND_DBR): byte offsets.
	RcvDBR = 0 * 4
	SndDBR = 1 * 4
	// CQ record words (MLX5_CQ_SET_CI, MLX5_CQ_ARM_DB): byte offsets.
	CQSetCI = 0 * 4
	CQArmDB = 1 * 4
)

// QPRecord is a QP's doorbell record: the 16-bit counters software has
// posted up to (the receive queue's WQE count, the send queue's WQEBB
// count), from the low 16 bits of their words (the kernel writes the whole
// send counter).
type QPRecord struct {
	Recv, Send uint16
}

// DecodeQPRecord decodes the 8-byte record b.
func DecodeQPRecord(b []byte) QPRecord {
	_ = b[RecordSize-1]
	return QPRecord{Recv: uint16(be.Uint32(b[RcvDBR:])), Send: uint16(be.Uint32(b[SndDBR:]))}
}

// Encode writes the record as the provider does.
func (r QPRecord) Encode(b []byte) {
	_ = b[RecordSize-1]
	be.PutUint32(b[RcvDBR:], uint32(r.Recv))
	be.PutUint32(b[SndDBR:], uint32(r.Send))
}

// SRQCounter is an SRQ's (RMP's, XRC SRQ's) doorbell record word 0: the
// number of WQEs ever posted, 16 bits (the provider's srq->counter).
func SRQCounter(b []byte) uint16 { return uint16(be.Uint32(b)) }

// Pending is the number of entries between a consumer counter and a
// producer counter of 16 bits: (pi - ci) mod 2^16.
func Pending(pi, ci uint16) uint16 { return pi - ci }

// CQ arm command bits (cq.h MLX5_CQ_DB_REQ_*), in the arm doorbell's first
// word and the record's arm word.
const (
	CQDBReqNot    = 0 << 24 // arm for the next CQE
	CQDBReqNotSol = 1 << 24 // arm for the next solicited (or error) CQE
	ciMask        = 0xffffff
	cmdMask       = 0xf << 24
	snShift       = 28
)

// Arm is a CQ arm command: word 0 of the arm doorbell, and the record's
// arm word (sn<<28 | cmd | ci).
type Arm struct {
	SN  uint8  // 2 bits: the arm sequence number
	Cmd uint32 // CQDBReqNot or CQDBReqNotSol, in place (bits 27:24)
	CI  uint32 // 24-bit consumer index at arm time
}

// DecodeArm decodes an arm word.
func DecodeArm(w uint32) Arm {
	return Arm{SN: uint8(w>>snShift) & 3, Cmd: w & cmdMask, CI: w & ciMask}
}

// Word encodes the arm word.
func (a Arm) Word() uint32 {
	return uint32(a.SN&3)<<snShift | a.Cmd&cmdMask | a.CI&ciMask
}

// Solicited reports an arm for solicited completions only.
func (a Arm) Solicited() bool { return a.Cmd == CQDBReqNotSol }

// CQRecord is a CQ's doorbell record.
type CQRecord struct {
	CI  uint32 // consumer index, 24 bits
	Arm Arm    // the last arm command
}

// DecodeCQRecord decodes the 8-byte record b.
func DecodeCQRecord(b []byte) CQRecord {
	_ = b[RecordSize-1]
	return CQRecord{CI: be.Uint32(b[CQSetCI:]) & ciMask, Arm: DecodeArm(be.Uint32(b[CQArmDB:]))}
}

// Encode writes the record as update_cons_index and mlx5_arm_cq do.
func (r CQRecord) Encode(b []byte) {
	_ = b[RecordSize-1]
	be.PutUint32(b[CQSetCI:], r.CI&ciMask)
	be.PutUint32(b[CQArmDB:], r.Arm.Word())
}

// UAR page registers (mlx5.md §7.4).
const (
	UARPageSize = 4096
	// CQDoorbell is the CQ arm register (doorbell.h MLX5_CQ_DOORBELL).
	CQDoorbell = 0x20
	// SendDoorbellStart..SendDoorbellEnd are the BlueFlame registers: any
	// 8-byte write there is a send doorbell (the kernel's bfregs at
	// 0x800 + 512*n, toggling 256-byte halves; the provider's shared
	// non-cached UAR at 0x800).
	SendDoorbellStart = 0x800
	SendDoorbellEnd   = 0x1000
)

// Send is a send doorbell: the first 8 bytes of the last posted WQE's
// control segment (opmod_idx_opcode, qpn_ds).
type Send struct {
	Opmod    uint8
	WQEIndex uint16
	Opcode   uint8
	QPN      uint32
	DS       uint8
}

// DecodeSend decodes the doorbell's 8 bytes (in the order they sit in the
// register: the big-endian word at +0, then the one at +4).
func DecodeSend(v [8]byte) Send {
	w0, w1 := be.Uint32(v[0:]), be.Uint32(v[4:])
	return Send{Opmod: uint8(w0 >> 24), WQEIndex: uint16(w0 >> 8), Opcode: uint8(w0), QPN: w1 >> 8, DS: uint8(w1 & 0x3f)}
}

// Bytes encodes the doorbell as the provider's post_send_db writes it.
func (s Send) Bytes() [8]byte {
	var v [8]byte
	be.PutUint32(v[0:], uint32(s.Opmod)<<24|uint32(s.WQEIndex)<<8|uint32(s.Opcode))
	be.PutUint32(v[4:], (s.QPN&0xffffff)<<8|uint32(s.DS&0x3f))
	return v
}

// Next is the SQ counter just past the WQE the doorbell names:
// wqe_index + ceil(ds/4) (mlx5.md §7.9; the doorbell record is
// authoritative).
func (s Send) Next() uint16 { return s.WQEIndex + (uint16(s.DS)+3)/4 }

// CQArm is a CQ arm doorbell: the arm word, then the CQN.
type CQArm struct {
	Arm
	CQN uint32 // 24 bits
}

// DecodeCQArm decodes the doorbell's 8 bytes.
func DecodeCQArm(v [8]byte) CQArm {
	return CQArm{Arm: DecodeArm(be.Uint32(v[0:])), CQN: be.Uint32(v[4:]) & ciMask}
}

// Bytes encodes the doorbell as mlx5_arm_cq and the kernel's mlx5_cq_arm
// write it.
func (c CQArm) Bytes() [8]byte {
	var v [8]byte
	be.PutUint32(v[0:], c.Arm.Word())
	be.PutUint32(v[4:], c.CQN&ciMask)
	return v
}
