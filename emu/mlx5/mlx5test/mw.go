package mlx5test

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Memory windows as Linux 6.12's mlx5_ib allocates them
// (mlx5_ib_alloc_mw) and rdma-core 56's provider binds and invalidates
// them (providers/mlx5/qp.c set_bind_wr: a UMR WQE on the user QP).

// AllocMW is mlx5_ib_alloc_mw: CREATE_MKEY of a free KLM mkey with umr_en
// and lr, translations_octword_size 4 (one KLM rounded up to 4),
// en_rinval for type 2, qpn 0xffffff.
func (d *Driver) AllocMW(pd uint32, type2 bool) (Mkey, error) {
	in := d.CreateMkeyIn(MkeyArgs{PD: pd, Mode: ifc.MkcAccessModeKLM, Free: true, Octwords: 4})
	ifc.MkcEnRinval.Set(ifc.CreateMkeyInMkc.Bytes(in), b2u(type2))
	return d.CreateMkey(in)
}

// MW access flags in the verbs numbering (IBV_ACCESS_*), as BindMWWQE
// takes them.
const (
	MWLocalWrite   = 1
	MWRemoteWrite  = 2
	MWRemoteRead   = 4
	MWRemoteAtomic = 8
	MWZeroBased    = 32
)

// Bind is an ibv_mw_bind_info with the window and the keys: window mw
// (its current key) bound to [Addr, Addr+Len) of the region of L_Key
// MRKey with access Access (MW* flags), the new key byte NewKey; QPN the
// posting QP (type 2).
type Bind struct {
	MW, MRKey uint32
	NewKey    uint8
	Type2     bool
	QPN       uint32
	Addr, Len uint64
	Access    uint32
}

// umrFence is the provider's next_fence for a bind or invalidate
// (MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE).
const umrFence = 1 << 5

// BindMWWQE is set_bind_wr's WQE (IBV_WR_BIND_MW, ibv_bind_mw; with Len
// 0 a type-1 unbind): ctrl.imm the window's key, UMR control segment,
// mkey segment and, for a bind, the 64-byte inline KLM segment.
func BindMWWQE(b Bind, signaled bool) uverbs.SendWQE {
	w := uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeUMR, FMCESE: umrFence, Imm: b.MW}, Segs: uverbs.HasUMR}
	if signaled {
		w.Ctrl.FMCESE |= 0x08
	}
	u := &w.UMRCtrl
	u.Flags = uverbs.UMRCtrlFlagTranslationOffset | uverbs.UMRCtrlFlagInline
	u.MkeyMask = uverbs.MkeyMaskFree | uverbs.MkeyMaskMkey
	if b.Type2 {
		u.MkeyMask |= uverbs.MkeyMaskQPN
	}
	qpn := uint32(0xffffff)
	if b.Type2 && b.Len != 0 {
		qpn = b.QPN
	}
	w.Mkey.QPNMkey = qpn<<8 | uint32(b.NewKey)
	if b.Len == 0 {
		if b.Type2 {
			u.Flags |= uverbs.UMRCtrlFlagCheckQPN
		}
		w.Mkey.Free = uverbs.MkeyContextFree
		return w
	}
	u.KLMOctowords = 4 // get_klm_octo(1): ALIGN(1, 3) / 2
	if b.Type2 {
		u.Flags |= uverbs.UMRCtrlFlagCheckFree
	}
	u.MkeyMask |= uverbs.MkeyMaskLen | uverbs.MkeyMaskStartAddr | uverbs.MkeyMaskAccessLocalWrite |
		uverbs.MkeyMaskAccessRemoteRead | uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic
	for _, f := range []struct {
		bit  uint32
		flag uint8
	}{{MWLocalWrite, uverbs.MkeyContextAccessFlagsLocalWrite}, {MWRemoteWrite, uverbs.MkeyContextAccessFlagsRemoteWrite},
		{MWRemoteRead, uverbs.MkeyContextAccessFlagsRemoteRead}, {MWRemoteAtomic, uverbs.MkeyContextAccessFlagsAtomic}} {
		if b.Access&f.bit != 0 {
			w.Mkey.AccessFlags |= f.flag
		}
	}
	if b.Access&MWZeroBased == 0 {
		w.Mkey.StartAddr = b.Addr
	}
	w.Mkey.Len = b.Len
	klm := make([]byte, 64)
	binary.BigEndian.PutUint32(klm, uint32(b.Len))
	binary.BigEndian.PutUint32(klm[4:], b.MRKey)
	binary.BigEndian.PutUint64(klm[8:], b.Addr)
	w.Translation = klm
	return w
}

// LocalInvWQE is the provider's IBV_WR_LOCAL_INV of key (set_bind_wr of
// a type-2 zero-length bind with new key 0).
func LocalInvWQE(key uint32, signaled bool) uverbs.SendWQE {
	return BindMWWQE(Bind{MW: key, Type2: true}, signaled)
}

// IncRKey is ibv_inc_rkey: the key with its low byte advanced.
func IncRKey(key uint32) uint32 { return key&^0xff | (key+1)&0xff }
