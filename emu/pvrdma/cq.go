package pvrdma

import (
	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// cq is a completion queue: a ring of 64-byte CQEs in guest memory that the
// device produces into (page 0 ring state, rx pair; CQE k at 4096 + 64k).
type cq struct {
	handle uint32
	ctx    uint32
	pages  dma.Pages
	ring   uverbs.Ring
	prod   uint32 // device-owned producer index
	refs   int    // QPs and SRQs using it
	armed  uint8  // 0, armNext or armSolicited
	broken bool   // overrun or corrupt ring: CQ_ERR posted, no more CQEs
	dirty  bool   // prod is ahead of the prod_tail the guest sees: in Device.dirtyCQs
}

const (
	armNext      = 1
	armSolicited = 2
)

func (d *Device) cmdCreateCQ(req *abi.CmdCreateCQ) (abi.Response, *cmdErr) {
	pdir, ctx, n, nchunks := req.PdirDMA, req.CtxHandle, req.CQE, req.NChunks
	if e := d.checkCtx(ctx); e != nil {
		return nil, e
	}
	if !uverbs.IsPow2(n) || n > d.caps.MaxCQE {
		return nil, fail(errInval, "pvrdma_cmd_create_cq.cqe=%d: not a power of two in 1..%d", n, d.caps.MaxCQE)
	}
	need := 1 + (uint64(n)*uverbs.CQESize+dma.PageSize-1)/dma.PageSize
	if uint64(nchunks) < need || nchunks > pagedir.MaxDirPages {
		return nil, fail(errInval, "pvrdma_cmd_create_cq.nchunks=%d: a CQ of %d entries needs %d pages (at most %d)", nchunks, n, need, pagedir.MaxDirPages).as(hca.FindingPageDir)
	}
	pages, e := d.pinPages("CQ", pdir, nchunks)
	if e != nil {
		return nil, e
	}
	c := &cq{ctx: ctx, pages: pages, ring: uverbs.Ring{N: n}}
	h, e := d.res.cq.add(c)
	if e != nil {
		d.res.unpin(int(nchunks))
		return nil, e
	}
	c.handle = h
	return &abi.CmdCreateCQResp{CQHandle: h, CQE: n}, nil
}

func (d *Device) cmdResizeCQ(*abi.CmdResizeCQ) (abi.Response, *cmdErr) {
	return nil, fail(errNotSup, "pvrdma_cmd_hdr.cmd=RESIZE_CQ: not supported (the device's driver never resizes)")
}

func (d *Device) cmdDestroyCQ(req *abi.CmdDestroyCQ) (abi.Response, *cmdErr) {
	h := req.CQHandle
	c := d.res.cq.get(h)
	if c == nil {
		return nil, fail(errInval, "cq_handle=%d: no such CQ", h).as(hca.FindingHandle)
	}
	if c.refs > 0 {
		return nil, fail(errBusy, "cq_handle=%d: still used by %d QPs/SRQs", h, c.refs)
	}
	d.destroyCQ(h, c)
	return nil, nil
}

func (d *Device) destroyCQ(h uint32, c *cq) {
	d.res.unpin(len(c.pages))
	d.res.cq.del(h)
}

// arm handles a CQ ARM / ARM_SOL doorbell.
func (d *Device) arm(c *cq, how uint8) {
	if c.armed != armNext {
		c.armed = how
	}
}

// post writes one CQE. It returns false when the CQ could not take it: the
// ring is full (overrun) or corrupt; the CQ then reports CQ_ERR once and
// takes nothing more.
func (d *Device) post(c *cq, cqe *uverbs.CQE, solicited bool) bool {
	if c.broken {
		return false
	}
	cons, err := dma.LoadUint32(d.mem, c.pages[0]+uverbs.RxConsHead)
	switch {
	case err != nil || !c.ring.Valid(cons):
		d.find(hca.FindingRingIndex, "CQ_ERR, the CQ takes no more", "cq %d pvrdma_ring.cons_head=%d: %v (ring of %d)", c.handle, cons, errOrRange(err), c.ring.N)
	case c.ring.Full(c.prod, cons):
		d.find(hca.FindingCQOverrun, "CQ_ERR, the CQ takes no more", "cq %d: full (%d entries, prod_tail=%d, cons_head=%d): the consumer did not poll, or the CQ is smaller than its queues", c.handle, c.ring.N, c.prod, cons)
	default:
		b := d.cqeBuf[:] // (a local array would escape through dma.Memory: one allocation per CQE)
		cqe.Encode(b)
		off := dma.PageSize + uint64(c.ring.Slot(c.prod))*uverbs.CQESize
		if err := c.pages.WriteAt(d.mem, b, off); err != nil {
			d.find(hca.FindingPageDir, "CQ_ERR, the CQ takes no more", "cq %d CQE slot %d: %v", c.handle, c.ring.Slot(c.prod), err)
			break
		}
		c.prod = c.ring.Next(c.prod)
		if !c.dirty {
			// prod_tail is stored once per batch of CQEs (publishRings).
			c.dirty = true
			d.dirtyCQs = append(d.dirtyCQs, c)
		}
		if c.armed == armNext || (c.armed == armSolicited && (solicited || cqe.Status != uverbs.WCSuccess)) {
			d.publishDirty() // the CQE is in the ring before the notification
			if d.notifyCQ(c.handle) {
				c.armed = 0
			}
		}
		return true
	}
	c.broken = true
	d.event(hca.EventCQErr, c.handle)
	return false
}
