package emutest

import (
	"github.com/hcaemu/hcaemu/dma"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Allower is a write oracle (verbstest.WriteWatch): the places the device
// may write.
type Allower interface {
	Allow(name string, gpa, n uint64)
}

// AllowDevice allows the places a probed device writes on its own: the
// response slot, the async event and CQ notification rings' entries and
// their producer indices.
func AllowDevice(w Allower, d *Driver) {
	w.Allow("device", d.RespSlot, dma.PageSize)
	for _, ring := range [][]uint64{d.AsyncRing, d.CQRing} {
		w.Allow("device", ring[0]+uverbs.RxProdTail, 4)
		for _, page := range ring[1:] {
			w.Allow("device", page, dma.PageSize)
		}
	}
}

// AllowCQ allows a CQ's entries and its producer index.
func AllowCQ(w Allower, name string, cq *CQ) {
	w.Allow(name, cq.Pages[0]+uverbs.RxProdTail, 4)
	for _, page := range cq.Pages[1:] {
		w.Allow(name, page, dma.PageSize)
	}
}

// AllowQP allows a QP's two device-owned consumer indices (never its work
// queue entries).
func AllowQP(w Allower, name string, qp *QP) {
	w.Allow(name, qp.Pages[0]+uverbs.TxConsHead, 4)
	w.Allow(name, qp.Pages[0]+uverbs.RxConsHead, 4)
}
