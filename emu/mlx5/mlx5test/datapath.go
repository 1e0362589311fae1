package mlx5test

import (
	"github.com/hcaemu/hcaemu/mmio"

	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The data path as rdma-core's mlx5 provider drives it (spec §7): WQEs
// written into the QP's buffer, the doorbell record's counters, the send
// doorbell through the UAR page's BlueFlame register (one 64-bit write,
// or two 32-bit halves), CQEs polled by their owner bit with the consumer
// index published in the CQ's doorbell record, and CQ arming.

// BFBufSize is the half of the BlueFlame register a doorbell goes to
// (log_bf_reg_size 9: 512-byte registers).
const BFBufSize = 256

// WQ is a QP's work queues as the provider keeps them: the buffer's
// geometry and the producer counters.
type WQ struct {
	Q             *QP
	UAR           uint32
	LogRQ         uint8
	RQStride      uint64 // bytes
	LogSQ         uint8
	SQPI, RQPI    uint16
	SplitDoorbell bool // ring send doorbells as two 32-bit writes
	// bfOffset toggles between the two halves of the BlueFlame register
	// after every doorbell, as the kernel and the provider do
	// (bf->offset ^= buf_size, buf_size = (1<<log_bf_reg_size)/2).
	bfOffset uint64
	// Hold, when set, runs the writes to guest memory of a post (WQE and
	// doorbell record) as the device's lock holder would: the device
	// reads them concurrently, which a guest does not mind and the race
	// detector does.
	Hold func(func())

	// wqe and db are PostSend's scratch: a post allocates nothing (the
	// benchmarks count the device's allocations).
	wqe [16 * uverbs.SendWQEBB]byte
	db  [8]byte
}

func (w *WQ) hold(fn func()) {
	if w.Hold == nil {
		fn()
		return
	}
	w.Hold(fn)
}

// bufAt is the guest address of byte off of a fragmented buffer.
func bufAt(b Buf, off uint64) uint64 { return b.Pages[off>>12] + off&4095 }

// writeBuf copies p into the buffer at off.
func (d *Driver) writeBuf(b Buf, off uint64, p []byte) {
	for len(p) > 0 {
		n := min(uint64(len(p)), 4096-off&4095)
		copy(d.Bytes(bufAt(b, off), int(n)), p[:n])
		p, off = p[n:], off+n
	}
}

// SQOffset is the buffer offset of SQ WQEBB counter c.
func (w *WQ) SQOffset(c uint16) uint64 {
	return uint64(1<<w.LogRQ)*w.RQStride*b2u64(w.RQStride != 0) + uint64(c&(1<<w.LogSQ-1))*uverbs.SendWQEBB
}

func b2u64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// PostSend writes a send WQE (its control segment's index, QPN and DS
// filled in here, and its DS when 0) at the SQ's producer, advances the doorbell record's
// send counter and rings the send doorbell. It returns the WQE's index.
func (d *Driver) PostSend(w *WQ, wqe *uverbs.SendWQE) uint16 {
	idx := w.SQPI
	wqe.Ctrl.WQEIndex, wqe.Ctrl.QPN = idx, w.Q.QPN
	b := w.wqe[:]
	clear(b)
	n := wqe.Encode(b)
	if wqe.Ctrl.DS == 0 {
		wqe.Ctrl.DS = uint8(n / 16)
		wqe.Ctrl.Encode(b)
	}
	bbs := uint16((n + uverbs.SendWQEBB - 1) / uverbs.SendWQEBB)
	if w.Hold != nil {
		w.Hold(func() { d.writeSQ(w, idx, bbs) })
	} else {
		d.writeSQ(w, idx, bbs) // no closure: it would escape through Hold
	}
	ctrl := &w.db
	copy(ctrl[:], b[:8])
	off := uint64(w.UAR)*doorbell.UARPageSize + doorbell.SendDoorbellStart + w.bfOffset
	w.bfOffset ^= BFBufSize
	if w.SplitDoorbell {
		if err := d.F.WriteRegion(mmio.RegionBAR0, off, ctrl[:4]); err != nil {
			panic(err)
		}
		if err := d.F.WriteRegion(mmio.RegionBAR0, off+4, ctrl[4:]); err != nil {
			panic(err)
		}
		return idx
	}
	if err := d.F.WriteRegion(mmio.RegionBAR0, off, ctrl[:]); err != nil {
		panic(err)
	}
	return idx
}

// writeSQ copies the bbs WQEBBs of w's scratch WQE to the SQ at idx and
// advances the doorbell record's send counter past them.
func (d *Driver) writeSQ(w *WQ, idx, bbs uint16) {
	for i := uint16(0); i < bbs; i++ {
		d.writeBuf(w.Q.Buf, w.SQOffset(idx+i), w.wqe[int(i)*uverbs.SendWQEBB:int(i+1)*uverbs.SendWQEBB])
	}
	w.SQPI = idx + bbs
	d.putRecord(w)
}

// PostRecv writes a receive WQE of data segments (terminated when shorter
// than the stride) at the RQ's producer and advances the record's receive
// counter.
func (d *Driver) PostRecv(w *WQ, segs ...uverbs.DataSeg) {
	b := make([]byte, w.RQStride)
	(&uverbs.RecvWQE{Data: segs}).Encode(b, false)
	w.hold(func() {
		d.writeBuf(w.Q.Buf, uint64(w.RQPI&(1<<w.LogRQ-1))*w.RQStride, b)
		w.RQPI++
		d.putRecord(w)
	})
}

func (d *Driver) putRecord(w *WQ) {
	doorbell.QPRecord{Recv: w.RQPI, Send: w.SQPI}.Encode(d.Bytes(w.Q.DBR, doorbell.RecordSize))
}

// PollCQ returns the 64-byte CQE at the CQ's consumer index if software
// owns it, advancing the index and publishing it in the doorbell record.
func (d *Driver) PollCQ(c *CQ, ci *uint32) ([]byte, bool) {
	out := make([]byte, uverbs.CQESize64)
	if !d.PollCQTo(c, ci, out) {
		return nil, false
	}
	return out, true
}

// PollCQTo is PollCQ copying the CQE into out (64 bytes), allocating
// nothing.
func (d *Driver) PollCQTo(c *CQ, ci *uint32, out []byte) bool {
	geo := c.geo()
	at := bufAt(c.Buf, geo.Offset(*ci))
	cqe := d.Bytes(at, uverbs.CQESize64)
	if !geo.SoftwareOwns(cqe[uverbs.OpOwnOffset], *ci) {
		return false
	}
	copy(out, cqe)
	*ci++
	rec := doorbell.DecodeCQRecord(d.Bytes(c.DBR, doorbell.RecordSize))
	rec.CI = *ci
	rec.Encode(d.Bytes(c.DBR, doorbell.RecordSize))
	return true
}

// geo is the CQ's ring geometry (Offset: where a CQE's 64-byte structure,
// last in a 128-byte CQE, is).
func (c *CQ) geo() uverbs.CQ {
	return uverbs.CQ{LogSize: c.LogSize, CQESize: max(c.CQESize, uverbs.CQESize64)}
}

// InitCQ sets every CQE's op_own to invalid, owner 0, as the provider
// does at creation.
func (d *Driver) InitCQ(c *CQ) {
	geo := c.geo()
	for i := uint32(0); i < 1<<c.LogSize; i++ {
		d.Bytes(bufAt(c.Buf, geo.Offset(i)), uverbs.CQESize64)[uverbs.OpOwnOffset] = uverbs.OpOwnInit
	}
}

// ArmCQ arms the CQ for its next CQE (solicited: the next solicited one)
// as mlx5_arm_cq does: the arm word in the doorbell record, then the CQ
// doorbell in the UAR page.
func (d *Driver) ArmCQ(c *CQ, uar uint32, ci uint32, sn uint8, solicited bool) {
	cmd := uint32(doorbell.CQDBReqNot)
	if solicited {
		cmd = doorbell.CQDBReqNotSol
	}
	a := doorbell.Arm{SN: sn, Cmd: cmd, CI: ci}
	if c.Hold != nil {
		c.Hold(func() { d.putArm(c, a) })
	} else {
		d.putArm(c, a)
	}
	v := doorbell.CQArm{Arm: a, CQN: c.CQN}.Bytes()
	if err := d.F.WriteRegion(mmio.RegionBAR0, uint64(uar)*doorbell.UARPageSize+doorbell.CQDoorbell, v[:]); err != nil {
		panic(err)
	}
}

// putArm writes the arm word into the CQ's doorbell record.
func (d *Driver) putArm(c *CQ, a doorbell.Arm) {
	rec := doorbell.DecodeCQRecord(d.Bytes(c.DBR, doorbell.RecordSize))
	rec.Arm = a
	rec.Encode(d.Bytes(c.DBR, doorbell.RecordSize))
}
