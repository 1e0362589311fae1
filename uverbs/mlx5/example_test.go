package mlx5_test

import (
	"encoding/binary"
	"fmt"

	"github.com/hcaemu/hcaemu/dma"
	mtt "github.com/hcaemu/hcaemu/dma/mlx5"
	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Example walks one send through the three format packages the way the
// device uses them (mlx5.md §7.9): the provider writes a WQE into the send
// queue and its doorbell record, rings the UAR send register in two 32-bit
// halves; the device latches the doorbell, reads the record, copies the WQE
// out of the ring through its PAS translation (it wraps), decodes it, and
// writes a CQE with the owner bit of its pass.
func Example() {
	mem := dma.NewFlat(0, 1<<20)
	pas := func(addrs ...uint64) []byte {
		b := make([]byte, 8*len(addrs))
		for i, a := range addrs {
			binary.BigEndian.PutUint64(b[8*i:], a)
		}
		return b
	}
	// CREATE_QP: an SQ of 4 WQEBBs on one 4 KiB page at 0x10000, 0x100
	// bytes in (page_offset 4); its doorbell record at 0x30000.
	// CREATE_CQ: 4 64-byte CQEs at 0x40000.
	sq := uverbs.SQ{LogSize: 2}
	sqBuf, _ := mtt.QueueBuffer(pas(0x10000), 0, 4, sq.Size(), 16)
	cq := uverbs.CQ{LogSize: 2, CQESize: uverbs.CQESize64}
	cqBuf, _ := mtt.QueueBuffer(pas(0x40000), 0, 0, cq.Size(), 16)
	const dbr, qpn = 0x30000, 0x123

	// The provider: an RC SEND of 24 inline bytes at SQ counter 3 (the last
	// WQEBB: the WQE wraps), then the record, then the doorbell.
	wqe := uverbs.SendWQE{
		Ctrl: uverbs.CtrlSeg{WQEIndex: 3, Opcode: uverbs.OpcodeSend, QPN: qpn, DS: 3, FMCESE: uverbs.WQECtrlCQUpdate},
		Segs: uverbs.HasInline, Inline: []byte("hello from the provider!")}
	b := make([]byte, 64*2)
	n := wqe.Encode(b)
	off, n1, n2 := sq.Spans(3, uint64(n))
	_ = sqBuf.WriteAt(mem, b[:n1], off)
	_ = sqBuf.WriteAt(mem, b[n1:n1+n2], 0)
	rec := make([]byte, doorbell.RecordSize)
	doorbell.QPRecord{Send: 3 + wqe.Ctrl.WQEBBs()}.Encode(rec)
	_ = mem.WriteAt(rec, dbr)
	db := doorbell.Send{WQEIndex: 3, Opcode: uverbs.OpcodeSend, QPN: qpn, DS: 3}.Bytes()

	// The device: the doorbell arrives as two 32-bit writes.
	var latch doorbell.Latch
	latch.Write(0x800, db[:4])
	d, ok := latch.Write(0x804, db[4:])
	fmt.Println("doorbell:", ok, d.Kind, fmt.Sprintf("qpn %#x", d.Send().QPN))

	_ = mem.ReadAt(rec, dbr)
	pi := doorbell.DecodeQPRecord(rec).Send
	for ci := uint16(3); ci != pi; {
		ctrl := make([]byte, uverbs.CtrlSegSize)
		_ = sqBuf.ReadAt(mem, ctrl, sq.Offset(ci))
		c, _ := uverbs.DecodeCtrlSeg(ctrl)
		w := make([]byte, int(c.DS)*uverbs.SendWQEDS)
		off, n1, n2 := sq.Spans(ci, uint64(len(w)))
		_ = sqBuf.ReadAt(mem, w[:n1], off)
		_ = sqBuf.ReadAt(mem, w[n1:n1+n2], 0)
		got, err := uverbs.DecodeSendWQE(w, uverbs.STRC, 16)
		fmt.Printf("WQE %d: opcode %#x, %q, %v\n", ci, got.Ctrl.Opcode, got.Inline, err)

		// Completion number 5 of the CQ: slot 1, second pass (owner 1).
		p := uint32(5)
		cqe := uverbs.CQE{SOpcode: got.Ctrl.Opcode, QPN: qpn, WQECounter: ci, Opcode: uverbs.CQEReq, Owner: cq.Owner(p)}
		out := make([]byte, uverbs.CQESize64)
		cqe.Encode(out)
		_ = cqBuf.WriteAt(mem, out[:uverbs.OpOwnOffset], cq.Offset(p))
		_ = cqBuf.WriteAt(mem, out[uverbs.OpOwnOffset:], cq.Offset(p)+uverbs.OpOwnOffset)
		ci += c.WQEBBs()
	}
	op := make([]byte, 1)
	_ = cqBuf.ReadAt(mem, op, cq.Offset(5)+uverbs.OpOwnOffset)
	fmt.Println("software owns CQE 5:", cq.SoftwareOwns(op[0], 5), "CQE 1:", cq.SoftwareOwns(op[0], 1))
	// Output:
	// doorbell: true send qpn 0x123
	// WQE 3: opcode 0xa, "hello from the provider!", <nil>
	// software owns CQE 5: true CQE 1: false
}
