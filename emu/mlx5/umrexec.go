package mlx5

import (
	"encoding/binary"
	"fmt"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The UMR engine shared by the kernel's two UMR users (spec §6.4, §7.5.7):
//
//   - the REG_UMR QP (umr.go): with umr_modify_entity_size_disabled = 0
//     mlx5_ib keeps an MR cache of free MTT mkeys (created at load, free =
//     1, umr_en = 1, in the UMR PD) and registers a user MR by loading its
//     MTT entries into one of them (mlx5r_umr_update_mr_pas: UMR WQEs
//     whose data segment points at up to 1 MiB of entries, at
//     xlt_offset; the last one also sets LEN, PAGE_SIZE, START_ADDR, the
//     access flags, PD, KEY and FREE = 0 under CHECK_NOT_FREE), and
//     fences it on deregistration (the revoke: FREE and the UMR PD);
//   - a kernel ULP's QP, created with fre = 1 ("fast registration
//     enabled", frwr.go): IB_WR_REG_MR (set_reg_wr: LEN, PAGE_SIZE,
//     START_ADDR, EN_RINVAL, KEY, the access flags, FREE = 0, under
//     CHECK_NOT_FREE, with the MR's MTT or KLM descriptors inline up to
//     64 bytes, else by pointer through the PD's local DMA L_Key) and
//     IB_WR_LOCAL_INV (FREE = 1 only).
//
// A WQE names its mkey by index (ctrl.imm >> 8); the whole key must match
// unless the WQE sets the key byte (KEY). Nothing changes unless every
// check passes; a change revokes the pages lent from the device's regions
// (the direct data path) and gives the region a new generation, so
// references taken before it stop resolving.

// umrFlags are the UMR control flags the kernel sets: INLINE, the
// free-check mode and TRANSLATION_OFFSET.
const umrFlags = uverbs.UMRCtrlFlagInline | uverbs.UMRCheckFree | uverbs.UMRCtrlFlagCheckFree | uverbs.UMRCtrlFlagTranslationOffset

// frwrMkeyMask are the mkey_mask bits a fast registration on a ULP's QP
// may set (the kernel's frwr_mkey_mask; the PD stays the MR's).
const frwrMkeyMask = uverbs.MkeyMaskLen | uverbs.MkeyMaskPageSize | uverbs.MkeyMaskStartAddr | uverbs.MkeyMaskEnRinval |
	uverbs.MkeyMaskMkey | uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite | uverbs.MkeyMaskAccessRemoteRead |
	uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic | uverbs.MkeyMaskSmallFence | uverbs.MkeyMaskFree

// Mkey access modes in a UMR's mkey segment (flags[1:0]).
const (
	umrModeMTT = 1
	umrModeKLM = 2
)

// mttSize and klmSize are a translation entry's bytes (struct mlx5_mtt,
// struct mlx5_klm).
const (
	mttSize = 8
	klmSize = uverbs.KLMSegSize
)

// umrReq is a UMR WQE as taken (copied out of the WQE once).
type umrReq struct {
	key    uint32 // ctrl.imm
	ctrl   uverbs.UMRCtrlSeg
	mkey   uverbs.MkeyContextSeg
	inline []byte // the inline translation
	// ptr is the data segment pointing at the translation (hasPtr).
	ptr    uverbs.DataSeg
	hasPtr bool
}

// umrQP is what the posting QP allows: the REG_UMR QP (any PD, the PD
// field) or a ULP QP with fre of protection domain pd.
type umrQP struct {
	regUMR bool
	pd     uint32
}

// umrExec validates a UMR WQE and applies it (lock held), and counts it
// (Stats). It returns the completion status and, for a failure, why.
func (d *Device) umrExec(req *umrReq, q umrQP) (transport.Status, string) {
	st, kind, why := d.umrRun(req, q)
	switch {
	case st != transport.StatusSuccess:
		d.stats.UMRRefused++
	case kind != nil:
		(*kind)++
	}
	return st, why
}

// umrRun is umrExec but the counting: it returns which counter the WQE
// counts in (nil: none).
func (d *Device) umrRun(req *umrReq, q umrQP) (transport.Status, *uint64, string) {
	u, m := &req.ctrl, &req.mkey
	allowed := uint64(umrMkeyMask)
	if !q.regUMR {
		allowed = frwrMkeyMask
	}
	switch {
	case u.Flags&^umrFlags != 0:
		return transport.StatusLocQPOpErr, nil, fmt.Sprintf("umr_ctrl.flags=%#x: INLINE, the free check and TRANSLATION_OFFSET only", u.Flags)
	case u.CheckFree() == uverbs.UMRCheckFree|uverbs.UMRCtrlFlagCheckFree:
		return transport.StatusLocQPOpErr, nil, fmt.Sprintf("umr_ctrl.flags=%#x: free-check mode 3", u.Flags)
	case u.MkeyMask&^allowed != 0:
		return transport.StatusLocQPOpErr, nil, fmt.Sprintf("umr_ctrl.mkey_mask=%#x: %#x not implemented here", u.MkeyMask, u.MkeyMask&^allowed)
	case u.MkeyMask&uverbs.MkeyMaskAccessLocalRead != 0 && m.AccessFlags&uverbs.MkeyContextAccessFlagsLocalRead == 0:
		return transport.StatusLocQPOpErr, nil, "mkey_seg.lr=0: local read is always granted"
	case m.Length64() && u.MkeyMask&uverbs.MkeyMaskLen != 0:
		return transport.StatusLocQPOpErr, nil, "mkey_seg.length64=1: a 2^64-byte translated mkey is not implemented"
	}
	o := &d.fn.obj
	h := mr.Handle(req.key)
	region := o.Region(h)
	switch {
	case region == nil:
		return transport.StatusLocProtErr, nil, "no such mkey"
	case u.MkeyMask&uverbs.MkeyMaskMkey == 0 && region.LKey != req.key:
		return transport.StatusLocProtErr, nil, fmt.Sprintf("the mkey of index %#x is %#x", h, region.LKey)
	case !o.umrEn[h]:
		return transport.StatusLocProtErr, nil, "created with umr_en=0"
	case region.DMA:
		return transport.StatusLocProtErr, nil, "the PA (DMA) mkey"
	case !q.regUMR && region.PD != q.pd:
		return transport.StatusLocProtErr, nil, fmt.Sprintf("an mkey of PD %#x, the QP of PD %#x", region.PD, q.pd)
	case q.regUMR && region.Window != nil:
		return transport.StatusLocProtErr, nil, "a memory window (bound by UMR WQEs on user QPs, mw.go)"
	}
	free := !region.Valid
	switch u.CheckFree() {
	case uverbs.UMRCheckFree: // the kernel's MLX5_UMR_CHECK_FREE: fail if free
		if free {
			return transport.StatusLocProtErr, nil, "the mkey is free (MLX5_UMR_CHECK_FREE: fail if free)"
		}
	case uverbs.UMRCtrlFlagCheckFree: // the kernel's MLX5_UMR_CHECK_NOT_FREE: fail unless free
		if !free {
			return transport.StatusLocProtErr, nil, "the mkey is live (MLX5_UMR_CHECK_NOT_FREE: fail unless free)"
		}
	}
	next := *region // the mkey as the WQE leaves it
	if u.MkeyMask&uverbs.MkeyMaskPD != 0 {
		if next.PD = m.PD(); o.pds.Get(next.PD) == nil {
			return transport.StatusLocProtErr, nil, fmt.Sprintf("mkey_seg.pd=%#x: no such PD", next.PD)
		}
	}
	for _, b := range umrAccessBits {
		if u.MkeyMask&b.mask == 0 {
			continue
		}
		next.Access &^= b.flag
		if m.AccessFlags&b.ctx != 0 {
			next.Access |= b.flag
		}
	}
	if u.MkeyMask&uverbs.MkeyMaskFree != 0 {
		next.Valid = m.Free&uverbs.MkeyContextFree == 0
	}
	if u.MkeyMask&uverbs.MkeyMaskMkey != 0 {
		next.LKey = mr.Key(h, m.MkeyVariant())
		next.RKey = next.LKey
	}
	if u.MkeyMask&uverbs.MkeyMaskEnRinval != 0 {
		next.FRMR = m.EnRinval()
	}
	if u.MkeyMask&uverbs.MkeyMaskStartAddr != 0 {
		next.Start = m.StartAddr
	}
	if u.MkeyMask&uverbs.MkeyMaskLen != 0 {
		next.Length = m.Len
	}
	klm := region.Window != nil || region.KLMs != nil
	if mode := m.AccessMode(); mode != 0 && (mode == umrModeKLM) != klm {
		return transport.StatusLocProtErr, nil, fmt.Sprintf("mkey_seg access mode %d for an mkey of access mode %s", mode, map[bool]string{true: "KLM", false: "MTT"}[klm])
	}
	if u.MkeyMask&uverbs.MkeyMaskPageSize != 0 && !klm {
		lps := m.LogPageSize & 0x3f
		if lps < minLogMTTPage || lps > maxLogMTTPage {
			return transport.StatusLocProtErr, nil, fmt.Sprintf("mkey_seg.log_page_size=%d: not %d..%d", lps, minLogMTTPage, maxLogMTTPage)
		}
		next.PageShift = lps
	}
	xlt, why := d.umrTranslation(req, q, next.PD)
	if why != "" {
		return transport.StatusLocProtErr, nil, why
	}
	pinned := len(region.Pages) + len(region.KLMs)
	if klm {
		if why := d.umrKLMs(&next, xlt, u.Offset()); why != "" {
			return transport.StatusLocProtErr, nil, why
		}
	} else if why := umrMTTs(&next, region, xlt, u.Offset()); why != "" {
		return transport.StatusLocProtErr, nil, why
	}
	if next.Valid {
		if why := d.umrLive(&next, klm); why != "" {
			return transport.StatusLocProtErr, nil, why
		}
	}
	if n := len(next.Pages) + len(next.KLMs); n > pinned {
		if err := d.fn.pins.Pin(uint32(n - pinned)); err != nil {
			return transport.StatusLocProtErr, nil, fmt.Sprintf("%d translation entries: %v", n, err)
		}
	} else {
		d.fn.pins.Unpin(pinned - n)
	}
	if xlt == nil && next.PD == region.PD && next.Access == region.Access && next.Valid == region.Valid && next.LKey == region.LKey &&
		next.Start == region.Start && next.Length == region.Length && next.PageShift == region.PageShift && next.FRMR == region.FRMR {
		return transport.StatusSuccess, nil, "" // nothing changes: references stay good
	}
	d.wire.RevokeLoans() // the region's pages may be lent to another HCA
	if next.PD != region.PD {
		if p := o.pds.Get(region.PD); p != nil {
			p.refs--
		}
		o.pds.Get(next.PD).refs++
	}
	if klm && xlt != nil {
		next.Window = nil // a KLM mkey fast-registered as an MR (SG_GAPS)
	}
	next.Gen = d.mrKeys.NewGen()
	var kind *uint64
	switch {
	case xlt != nil && q.regUMR:
		kind = &d.stats.UMRTranslations
	case xlt != nil && klm:
		kind = &d.stats.FastRegKLM
	case xlt != nil:
		kind = &d.stats.FastRegMTT
	case region.Valid && !next.Valid:
		kind = &d.stats.UMRInvalidations
	}
	*region = next
	return transport.StatusSuccess, kind, ""
}

// umrTranslation is the WQE's translation: its inline bytes, or the
// xlt_octowords*16 bytes its data segment points at, read once through
// the segment's L_Key (of the QP's PD on a ULP QP; the REG_UMR QP's
// pointer is of the kernel's UMR PD, pd is then the mkey's). nil: none.
func (d *Device) umrTranslation(req *umrReq, q umrQP, pd uint32) ([]byte, string) {
	n := int(req.ctrl.KLMOctowords) * 16
	if n == 0 {
		return nil, ""
	}
	if !req.hasPtr {
		if len(req.inline) != n {
			return nil, fmt.Sprintf("umr_ctrl.xlt_octowords=%d: %d inline bytes", req.ctrl.KLMOctowords, len(req.inline))
		}
		return req.inline, ""
	}
	p := req.ptr
	if p.ByteCount < uint32(n) {
		return nil, fmt.Sprintf("translation pointer byte_count=%d < xlt_octowords*16=%d", p.ByteCount, n)
	}
	src := mr.Lookup(&d.fn.obj, p.LKey, false)
	if src == nil {
		return nil, fmt.Sprintf("translation pointer lkey=%#x: no such L_Key", p.LKey)
	}
	if !q.regUMR {
		pd = q.pd
	} else {
		pd = src.PD
	}
	s := d.space()
	segs, _, err := s.Segs(pd, []mr.SGE{{Addr: p.Addr, Length: uint32(n), LKey: p.LKey}}, false)
	if err != nil {
		return nil, fmt.Sprintf("translation pointer [%#x, +%#x) lkey=%#x: %v", p.Addr, n, p.LKey, err)
	}
	buf := make([]byte, n) // at most 65535*16 bytes
	if err := s.Copy(segs, 0, buf, false); err != nil {
		return nil, fmt.Sprintf("translation pointer [%#x, +%#x): %v", p.Addr, n, err)
	}
	return buf, ""
}

// xltAlign is the alignment of a UMR's translation (the kernel's
// MLX5_UMR_FLEX_ALIGNMENT): mlx5_ib loads translations in multiples of 64
// bytes, zero-padded, even into an mkey created with room for fewer
// entries (its MR cache's smallest mkeys hold 4 MTT entries, their loads
// carry 8), so an mkey's capacity counts in whole 64-byte units.
const xltAlign = 64

// xltCapacity is how many entries of size bytes an mkey created with room
// for n holds: n rounded up to whole 64-byte units.
func xltCapacity(n uint32, size int) uint64 {
	per := uint64(xltAlign / size)
	return (uint64(n) + per - 1) / per * per
}

// umrMTTs writes MTT entries xlt (if any) at entry 2*off (off in 16-byte
// units) of next's translation, within the capacity the mkey was created
// with. The new page list is a copy: region's stays as it was until the
// WQE is applied.
func umrMTTs(next, region *mr.Region, xlt []byte, off uint64) string {
	if xlt == nil {
		return ""
	}
	first, n, capacity := 2*off, uint64(len(xlt)/mttSize), xltCapacity(region.MaxPages, mttSize)
	if off > capacity || first+n > capacity {
		return fmt.Sprintf("MTT entries [%d, +%d) beyond the mkey's translations_octword_size*2 = %d (%d in 64-byte units)", first, n, region.MaxPages, capacity)
	}
	pages := make([]uint64, max(uint64(len(region.Pages)), first+n))
	copy(pages, region.Pages)
	for i := range n {
		pages[first+i] = binary.BigEndian.Uint64(xlt[mttSize*i:]) &^ 7 // the low bits are the entry's read/write flags
	}
	next.Pages = pages
	return ""
}

// umrKLMs makes next indirect over the KLM entries xlt (all of them from
// entry 0: a fast registration replaces the whole list), up to next's
// length; an entry names a region of next's PD by its L_Key, neither a
// window nor another indirect region, and lets it be written only if it
// grants local write.
func (d *Device) umrKLMs(next *mr.Region, xlt []byte, off uint64) string {
	if xlt == nil {
		return ""
	}
	if off != 0 {
		return fmt.Sprintf("umr_ctrl xlt_offset=%d on a KLM mkey: a KLM list loads from entry 0", off)
	}
	if n, capacity := uint64(len(xlt)/klmSize), xltCapacity(next.MaxPages, klmSize); n > capacity {
		return fmt.Sprintf("%d KLM entries beyond the mkey's translations_octword_size %d (%d in 64-byte units)", n, next.MaxPages, capacity)
	}
	writes := next.Access&(mr.LocalWrite|mr.RemoteWrite|mr.RemoteAtomic) != 0
	var klms []mr.Seg
	var total uint64
	for i := 0; i+klmSize <= len(xlt) && total < next.Length; i += klmSize {
		n, key, addr := uint64(binary.BigEndian.Uint32(xlt[i:])), binary.BigEndian.Uint32(xlt[i+4:]), binary.BigEndian.Uint64(xlt[i+8:])
		n = min(n, next.Length-total)
		target := mr.Lookup(&d.fn.obj, key, false)
		switch {
		case target == nil:
			return fmt.Sprintf("klm[%d].mkey=%#x: no such L_Key", i/klmSize, key)
		case target.PD != next.PD:
			return fmt.Sprintf("klm[%d].mkey=%#x: a region of PD %#x, the mkey of PD %#x", i/klmSize, key, target.PD, next.PD)
		case target.KLMs != nil:
			return fmt.Sprintf("klm[%d].mkey=%#x: an indirect mkey", i/klmSize, key)
		case !target.InRange(addr, n):
			return fmt.Sprintf("klm[%d] [%#x, +%#x) outside its region", i/klmSize, addr, n)
		case writes && target.Access&mr.LocalWrite == 0:
			return fmt.Sprintf("klm[%d].mkey=%#x: no local write under an mkey that grants writes", i/klmSize, key)
		}
		if n > 0 {
			klms = append(klms, mr.Seg{Ref: mr.Ref{Handle: mr.Handle(key), Key: key, PD: target.PD, Gen: target.Gen}, Addr: addr, Len: n})
		}
		total += n
	}
	if total != next.Length {
		return fmt.Sprintf("KLM entries cover %#x bytes of mkey_seg.len %#x", total, next.Length)
	}
	if klms == nil {
		klms = []mr.Seg{} // indirect and empty: nothing to reach
	}
	next.KLMs = klms
	return ""
}

// umrLive checks an mkey the WQE leaves valid: a range that does not wrap
// and, for MTT, a loaded page for every page of it, each aligned to the
// page size and inside guest memory (a KLM list was checked as loaded).
func (d *Device) umrLive(next *mr.Region, klm bool) string {
	end, ok := endOf(next.Start, next.Length)
	switch {
	case next.Length == 0 || next.Length > maxMkeyLen:
		return fmt.Sprintf("len=%#x: empty or beyond %#x", next.Length, uint64(maxMkeyLen))
	case !ok:
		return fmt.Sprintf("start_addr=%#x len=%#x: wraps", next.Start, next.Length)
	case klm && next.KLMs == nil:
		return "a KLM mkey without a translation"
	case klm:
		return ""
	}
	shift := next.PageShift
	if shift == 0 {
		return "an MTT mkey without a page size"
	}
	base := next.Start >> shift
	npages := (end-1)>>shift - base + 1
	if npages > uint64(len(next.Pages)) {
		return fmt.Sprintf("[%#x, +%#x) in %d-byte pages needs %d MTT entries, %d loaded", next.Start, next.Length, uint64(1)<<shift, npages, len(next.Pages))
	}
	size := uint64(1) << shift
	for i, addr := range next.Pages[:npages] {
		if addr&(size-1) != 0 {
			return fmt.Sprintf("mtt[%d]=%#x: not aligned to the %d-byte page", i, addr, size)
		}
		if err := d.guestRange(addr, 1); err != nil {
			return fmt.Sprintf("mtt[%d]=%#x: %v", i, addr, err)
		}
	}
	return ""
}
