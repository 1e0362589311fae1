package mlx5

import (
	"encoding/binary"
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Memory windows (spec §6.4 "Memory window", §7.5.7). ibv_alloc_mw is
// mlx5_ib_alloc_mw's CREATE_MKEY: access mode KLM, free = 1, umr_en = 1,
// en_rinval for type 2 (createMkey makes the region a window,
// mr.Region.Window). DEALLOC_MW is DESTROY_MKEY. The provider binds and
// invalidates a window with a UMR WQE (opcode 0x25) on a user RC or UC QP
// (providers/mlx5/qp.c set_bind_wr), for IBV_WR_BIND_MW, ibv_bind_mw and
// IBV_WR_LOCAL_INV alike; ctrl.imm names the window by its current key:
//
//   - bind (mkey segment free = 0): flags INLINE | TRANSLATION_OFFSET
//     (| CHECK_FREE, 0x20, for type 2), mkey_mask FREE | MKEY | LEN |
//     START_ADDR | LW | RR | RW | A (| QPN for type 2), the mkey segment's
//     access flags, start_addr (0 when zero-based), len and new key byte
//     (qpn_mkey: the binding QP's QPN for type 2, 0xffffff for type 1),
//     then klm_octowords = 4 (64 bytes) of inline translation whose first
//     KLM (byte_count, mkey, address) names the memory region by its
//     L_Key;
//   - type 1 unbind (ibv_bind_mw of length 0): mkey_mask FREE | MKEY,
//     free = 1, the new key byte, no translation;
//   - LOCAL_INV: flags INLINE | TRANSLATION_OFFSET | CHECK_QPN, mkey_mask
//     FREE | MKEY | QPN, free = 1, qpn_mkey 0xffffff00 (key byte 0: the
//     provider passes no new key; the window keeps its key, so a later
//     bind names it by the key it had).
//
// The request runs in order as a local operation of the transport (it
// completes once what was posted before it has) and completes with a REQ
// CQE of opcode 0x25 (the provider reports BIND_MW or LOCAL_INV from its
// own bookkeeping). A bind that fails its checks completes with an error
// CQE of syndrome MW_BIND_ERR (0x06, mlx5_handle_error_cqe's
// IBV_WC_MW_BIND_ERR) and moves the QP to ERR; a WQE in a form the
// provider never posts, LOC_QP_OP_ERR. A bound window reaches the region
// it names over its own range and access only (mr.Space.Remote); the
// region must stay the registration it was bound to. SEND_WITH_INV of a
// type-2 window's R_Key arriving on the QP it was bound through
// invalidates it (mr.Space.Invalidate).
//
// No mkey context bit carries IBV_ACCESS_MW_BIND (mlx5_ib's
// set_mkc_access_pd_addr_fields sets a, rw, rr, lw, lr only, and the
// provider's check is under MW_DEBUG): the device cannot refuse a bind to
// a region registered without it, and does not.

// statusMWBindErr is IBV_WC_MW_BIND_ERR (the transport has no status of
// its own for it; syndromeOf maps it to MW_BIND_ERR, faults.go).
const statusMWBindErr = transport.Status(6)

// bindFlags are the UMR control flags a user UMR may set.
const bindFlags = uverbs.UMRCtrlFlagInline | uverbs.UMRCtrlFlagTranslationOffset |
	uverbs.UMRCtrlFlagCheckFree | uverbs.UMRCtrlFlagCheckQPN

// bindMask are the mkey_mask bits a user UMR may set.
const bindMask = uverbs.MkeyMaskFree | uverbs.MkeyMaskMkey | uverbs.MkeyMaskQPN |
	uverbs.MkeyMaskLen | uverbs.MkeyMaskStartAddr | uverbs.MkeyMaskAccessLocalWrite |
	uverbs.MkeyMaskAccessRemoteRead | uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic

// bindRequired are the mkey_mask bits a bind (free = 0) must set.
const bindRequired = uverbs.MkeyMaskFree | uverbs.MkeyMaskMkey | uverbs.MkeyMaskLen | uverbs.MkeyMaskStartAddr

// maxBindLen is the longest window a KLM describes (byte_count: 2 GiB).
const maxBindLen = 1 << 31

// mwBind is a user UMR WQE as taken (copied out of the WQE once).
type mwBind struct {
	key  uint32 // ctrl.imm: the window's current key
	ctrl uverbs.UMRCtrlSeg
	mkey uverbs.MkeyContextSeg
	// The first KLM of the inline translation, and whether anything
	// other than zero follows it.
	klmLen, klmKey uint32
	klmAddr        uint64
	hasKLM, extra  bool
	data           bool // the translation by pointer (data segments)
}

// takeBind keeps the decoded user UMR WQE taken at SQ counter start for
// LocalOp (the transport runs it in order, as a local operation).
func (env *qpEnv) takeBind(wr *transport.SendWR, start uint16) {
	w := &env.sw
	b := mwBind{key: w.Ctrl.Imm, ctrl: w.UMRCtrl, mkey: w.Mkey, data: len(w.Data) != 0}
	if t := w.Translation; len(t) >= uverbs.KLMSegSize {
		b.hasKLM = true
		b.klmLen, b.klmKey, b.klmAddr = binary.BigEndian.Uint32(t), binary.BigEndian.Uint32(t[4:]), binary.BigEndian.Uint64(t[8:])
		for _, c := range t[uverbs.KLMSegSize:] {
			if c != 0 {
				b.extra = true
				break
			}
		}
	} else if len(t) != 0 {
		b.extra = true
	}
	if env.binds == nil {
		env.binds = map[uint16]mwBind{}
	}
	env.binds[start] = b // bounded by the SQ's slots
	wr.Opcode, wr.Status = transport.OpFastReg, transport.StatusSuccess
	wr.Segs, wr.Length = wr.Segs[:0], 0
}

// LocalOp runs a user UMR WQE (a memory-window bind or invalidation) when
// the transport reaches it.
func (env *qpEnv) LocalOp(wr *transport.SendWR) transport.Status {
	start := uint16(wr.ID)
	if fr, ok := env.fastRegs[start]; ok && wr.Opcode == transport.OpFastReg {
		delete(env.fastRegs, start)
		return env.fastReg(start, &fr)
	}
	b, ok := env.binds[start]
	if wr.Opcode != transport.OpFastReg || !ok {
		return transport.StatusLocQPOpErr
	}
	delete(env.binds, start)
	st, why := env.d.bindMW(env.q.QPN, env.q.PD, &b)
	if why != "" {
		env.d.find(hca.FindingWQE, "completed with "+hca.WCStatusName(uint32(st)), "qp %#x UMR WQE %#x on mkey %#x: %s",
			env.q.QPN, start, b.key, why)
	}
	return st
}

// bindMW validates a user UMR WQE of QP qpn (of PD pd) and applies it
// (lock held). Nothing changes unless every check passes; a change
// revokes the pages lent from the device's regions first and gives the
// window a new generation, so references taken through it before stop
// resolving.
func (d *Device) bindMW(qpn, pd uint32, b *mwBind) (transport.Status, string) {
	u, m := &b.ctrl, &b.mkey
	switch {
	case u.Flags&^bindFlags != 0 || u.Flags&uverbs.UMRCtrlFlagInline == 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.flags=%#x: INLINE, TRANSLATION_OFFSET, CHECK_FREE, CHECK_QPN only, INLINE set", u.Flags)
	case u.MkeyMask&^bindMask != 0 || u.MkeyMask&uverbs.MkeyMaskFree == 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.mkey_mask=%#x: FREE always; MKEY, QPN, LEN, START_ADDR and the access bits only", u.MkeyMask)
	case u.TranslationOffset != 0 || b.data:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.translation_offset=%d, by pointer %v: an inline translation from 0 only", u.TranslationOffset, b.data)
	}
	o := &d.fn.obj
	h := mr.Handle(b.key)
	w := o.Region(h)
	switch {
	case w == nil:
		return statusMWBindErr, "no such mkey"
	case w.Window == nil || !o.umrEn[h]:
		return statusMWBindErr, "not a memory window (a KLM mkey with umr_en)"
	case w.LKey != b.key:
		return statusMWBindErr, fmt.Sprintf("the window of index %#x is %#x", h, w.LKey)
	case w.PD != pd:
		return statusMWBindErr, fmt.Sprintf("the window is of PD %#x, the QP of PD %#x", w.PD, pd)
	}
	win := w.Window
	type2 := u.MkeyMask&uverbs.MkeyMaskQPN != 0
	if type2 != win.Type2 {
		return statusMWBindErr, fmt.Sprintf("umr_ctrl.mkey_mask QPN=%v for a window of type 2=%v (en_rinval)", type2, win.Type2)
	}
	if m.Free&uverbs.MkeyContextFree != 0 {
		return d.unbindMW(qpn, w, b)
	}
	// A bind.
	switch {
	case u.MkeyMask&bindRequired != bindRequired:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.mkey_mask=%#x: a bind sets FREE, MKEY, LEN and START_ADDR", u.MkeyMask)
	case !b.hasKLM || b.extra:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.klm_octowords=%d: one inline KLM", u.KLMOctowords)
	case uint64(u.KLMOctowords) > uint64(w.MaxPages):
		return statusMWBindErr, fmt.Sprintf("umr_ctrl.klm_octowords=%d beyond the window's translations_octword_size %d", u.KLMOctowords, w.MaxPages)
	case (u.CheckFree() != 0 || type2) && w.Valid:
		return statusMWBindErr, "the window is bound (a type-2 bind needs it free)"
	case u.CheckFree() == uverbs.UMRCheckFree|uverbs.UMRCtrlFlagCheckFree:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.flags=%#x: free-check mode 3", u.Flags)
	case m.Len == 0 || m.Len > maxBindLen || uint64(b.klmLen) != m.Len:
		return statusMWBindErr, fmt.Sprintf("mkey_seg.len=%#x, klm.byte_count=%#x: equal, 1 byte to 2 GiB", m.Len, b.klmLen)
	case type2 && m.QPN() != qpn:
		return statusMWBindErr, fmt.Sprintf("mkey_seg.qpn=%#x: a type-2 window binds to the posting QP %#x", m.QPN(), qpn)
	case !type2 && m.QPN() != 0xffffff:
		return statusMWBindErr, fmt.Sprintf("mkey_seg.qpn=%#x: 0xffffff for a type-1 window", m.QPN())
	}
	if _, ok := endOf(m.StartAddr, m.Len); !ok {
		return statusMWBindErr, fmt.Sprintf("mkey_seg.start_addr=%#x len=%#x: wraps", m.StartAddr, m.Len)
	}
	target := mr.Lookup(o, b.klmKey, false)
	switch {
	case target == nil || target.DMA:
		return statusMWBindErr, fmt.Sprintf("klm.mkey=%#x: no memory region has that L_Key", b.klmKey)
	case target.PD != w.PD:
		return statusMWBindErr, fmt.Sprintf("klm.mkey=%#x: a region of PD %#x, the window of PD %#x", b.klmKey, target.PD, w.PD)
	case !target.InRange(b.klmAddr, m.Len):
		return statusMWBindErr, fmt.Sprintf("klm [%#x, +%#x) outside the region [%#x, +%#x)", b.klmAddr, m.Len, target.Start, target.Length)
	}
	var access uint32
	for _, a := range umrAccessBits {
		if m.AccessFlags&a.ctx != 0 {
			access |= a.flag
		}
	}
	switch {
	case access&mr.LocalWrite != 0 && target.Access&mr.LocalWrite == 0:
		return statusMWBindErr, fmt.Sprintf("window access %s: local write beyond the region's %s", mr.AccessString(access), mr.AccessString(target.Access))
	case access&(mr.RemoteWrite|mr.RemoteAtomic) != 0 && target.Access&mr.LocalWrite == 0:
		return statusMWBindErr, fmt.Sprintf("window access %s: remote write or atomic on a region without local write (%s)", mr.AccessString(access), mr.AccessString(target.Access))
	}
	d.wire.RevokeLoans() // the window's pages may be lent to another HCA
	w.Valid, w.Access = true, access
	w.Start, w.Length = m.StartAddr, m.Len
	w.Window = &mr.Window{Type2: type2, QPN: m.QPN(), Addr: b.klmAddr,
		Target: mr.Ref{Handle: mr.Handle(b.klmKey), Key: b.klmKey, PD: target.PD, Gen: target.Gen}}
	w.LKey = mr.Key(h, m.MkeyVariant())
	w.RKey = w.LKey
	w.Gen = d.mrKeys.NewGen()
	return transport.StatusSuccess, ""
}

// unbindMW is a UMR WQE freeing window w: a type-1 unbind (a bind of
// length 0, which takes the new key byte) or a type-2 LOCAL_INV (CHECK_QPN:
// bound through the posting QP; the window keeps its key).
func (d *Device) unbindMW(qpn uint32, w *mr.Region, b *mwBind) (transport.Status, string) {
	u, m, win := &b.ctrl, &b.mkey, w.Window
	switch {
	case u.KLMOctowords != 0 || b.hasKLM || b.extra:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.klm_octowords=%d with free=1", u.KLMOctowords)
	case u.MkeyMask&(uverbs.MkeyMaskLen|uverbs.MkeyMaskStartAddr) != 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.mkey_mask=%#x: LEN or START_ADDR with free=1", u.MkeyMask)
	case u.CheckFree() != 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.flags=%#x: a free check with free=1", u.Flags)
	case win.Type2 && u.Flags&uverbs.UMRCtrlFlagCheckQPN != 0 && w.Valid && win.QPN != qpn:
		return statusMWBindErr, fmt.Sprintf("CHECK_QPN: the window is bound through QP %#x, not %#x", win.QPN, qpn)
	}
	next := w.LKey
	if !win.Type2 && u.MkeyMask&uverbs.MkeyMaskMkey != 0 {
		next = mr.Key(mr.Handle(w.LKey), m.MkeyVariant())
	}
	if !w.Valid && next == w.LKey {
		return transport.StatusSuccess, "" // free already: nothing changes
	}
	d.wire.RevokeLoans()
	w.Valid = false
	w.LKey, w.RKey = next, next
	w.Gen = d.mrKeys.NewGen()
	return transport.StatusSuccess, ""
}
