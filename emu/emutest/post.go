package emutest

import uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"

// WriteSend writes a send WQE at the SQ producer index and advances the
// index, without ringing the doorbell: a test that writes guest memory only
// while it holds the device's lock (a guest racing the device, under the
// race detector) writes under the lock, then rings with RingSend.
func (q *QP) WriteSend(w uverbs.SendWQE) {
	if w.NumSGE == 0 {
		w.NumSGE = uint32(len(w.SGE))
	}
	gpa := q.slot(1, q.sqStride, q.sqProd, q.Spec.SendWR)
	w.Encode(q.d.RAM.Mem[gpa : gpa+uint64(q.sqStride)])
	q.sqProd = uverbs.Ring{N: q.Spec.SendWR}.Next(q.sqProd)
	q.d.Put32(q.Pages[0]+uverbs.TxProdTail, q.sqProd)
}

// RingSend rings the SQ doorbell.
func (q *QP) RingSend() { q.d.Doorbell(q.Spec.UAR, 0, q.Handle|1<<30) }

// WriteRecv writes a receive WQE at the RQ producer index and advances the
// index, without ringing the doorbell (see WriteSend).
func (q *QP) WriteRecv(w uverbs.RecvWQE) {
	if w.NumSGE == 0 {
		w.NumSGE = uint32(len(w.SGE))
	}
	gpa := q.slot(1+q.sendChunks, q.rqStride, q.rqProd, q.Spec.RecvWR)
	w.Encode(q.d.RAM.Mem[gpa : gpa+uint64(q.rqStride)])
	q.rqProd = uverbs.Ring{N: q.Spec.RecvWR}.Next(q.rqProd)
	q.d.Put32(q.Pages[0]+uverbs.RxProdTail, q.rqProd)
}

// RingRecv rings the RQ doorbell.
func (q *QP) RingRecv() { q.d.Doorbell(q.Spec.UAR, 0, q.Handle|1<<31) }
