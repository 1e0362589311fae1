package mlx5

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// unhex decodes a hex dump written one 16-byte segment per line.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantBytes fails the test unless got is the hex dump want.
func wantBytes(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if w := unhex(t, want); !cmp.Equal(got, w) {
		t.Fatalf("%s\n% x\nwant\n% x", what, got, w)
	}
}

// TestCtrlSegLayout: struct mlx5_wqe_ctrl_seg as mlx5dv_set_ctrl_seg fills
// it: opmod_idx_opcode = opmod<<24 | pi<<8 | opcode, qpn_ds = qpn<<8 | ds,
// signature at 8, dci_stream_channel_id at 9, fm_ce_se at 11, imm at 12.
func TestCtrlSegLayout(t *testing.T) {
	c := CtrlSeg{Opmod: 0x01, WQEIndex: 0xbeef, Opcode: OpcodeRDMAWriteImm, QPN: 0xabcdef, DS: 0x3f,
		Signature: 0x5a, DCIStreamChannelID: 0x1234, FMCESE: FenceModeSmallAndFence | WQECtrlCQUpdate | WQECtrlSolicited, Imm: 0x11223344}
	b := make([]byte, 16)
	c.Encode(b)
	wantBytes(t, "control segment", b, "01beef09 abcdef3f 5a12348a 11223344")
	got, ok := DecodeCtrlSeg(b)
	if !ok || got != c {
		t.Fatalf("decoded %+v, want %+v", got, c)
	}
	if !c.Signaled() || !c.Solicited() || c.FenceMode() != 0x80 || c.CE() != 0x08 || c.WQEBBs() != 16 {
		t.Errorf("accessors: signaled %v solicited %v fence %#x ce %#x wqebbs %d", c.Signaled(), c.Solicited(), c.FenceMode(), c.CE(), c.WQEBBs())
	}
	// The header constants, from qp.h and mlx5dv.h.
	for _, k := range []struct{ got, want int }{
		{WQECtrlCQUpdate, 0x08}, {WQECtrlCQUpdateAndEQE, 0x0c}, {WQECtrlSolicited, 0x02},
		{FenceModeInitiatorSmall, 0x20}, {FenceModeFence, 0x40}, {FenceModeStrongOrdering, 0x60}, {FenceModeSmallAndFence, 0x80},
		{InlineSeg, 0x80000000}, {InvalidLKey, 0x100}, {ExtendedUDAV, 0x80000000},
		{SendWQEBB, 64}, {SendWQEMaxWQEBB, 16}, {MaxDS, 63},
	} {
		if k.got != k.want {
			t.Errorf("constant %#x, want %#x", k.got, k.want)
		}
	}
	for n, want := range map[uint8]uint16{1: 1, 4: 1, 5: 2, 8: 2, 12: 3, 63: 16} {
		if WQEBBs(n) != want {
			t.Errorf("WQEBBs(%d) = %d, want %d", n, WQEBBs(n), want)
		}
	}
}

// TestAVLayout: struct mlx5_wqe_av as mlx5_create_ah and _set_datagram_seg
// fill it on InfiniBand.
func TestAVLayout(t *testing.T) {
	a := AV{QKey: 0x11111111, DQPDCT: ExtendedUDAV | 0x000123, StatRateSL: 3<<4 | 5, FLMLID: 0x7f, RLID: 0x0042,
		RMAC: [6]byte{1, 2, 3, 4, 5, 6}, TClass: 0x20, HopLimit: 0x40, GRHGIDFL: AVGRH | 2<<20 | 0xabcde,
		RGID: [16]byte{0xfe, 0x80, 15: 0x01}}
	b := make([]byte, AVSize)
	a.Encode(b)
	wantBytes(t, "AV", b, `
		11111111 00000000 80000123 357f0042
		00000000 01020304 05062040 402abcde
		fe800000 00000000 00000000 00000001`)
	if got := DecodeAV(b); got != a {
		t.Fatalf("decoded %+v", got)
	}
	if a.DQPN() != 0x123 || a.StatRate() != 3 || a.SL() != 5 || a.SrcPathBits() != 0x7f || a.ForceLoopback() ||
		!a.GRH() || a.SGIDIndex() != 2 || a.FlowLabel() != 0xabcde || a.UseQPQKey() || !(AV{QKey: 0x80010000}).UseQPQKey() {
		t.Errorf("accessors of %+v", a)
	}
}

// TestUMRLayout: the UMR control and mkey context segments
// (struct mlx5_wqe_umr_ctrl_seg, struct mlx5_wqe_mkey_context_seg).
func TestUMRLayout(t *testing.T) {
	u := UMRCtrlSeg{Flags: UMRCtrlFlagInline | UMRCtrlFlagTranslationOffset | UMRCtrlFlagCheckFree, KLMOctowords: 4,
		MkeyMask: MkeyMaskFree | MkeyMaskMkey | MkeyMaskQPN | MkeyMaskLen | MkeyMaskStartAddr |
			MkeyMaskAccessLocalWrite | MkeyMaskAccessRemoteRead | MkeyMaskAccessRemoteWrite | MkeyMaskAccessAtomic}
	b := make([]byte, UMRCtrlSegSize)
	u.Encode(b)
	wantBytes(t, "UMR control", b, "b0000000 00040000 00000000 203c6041"+strings.Repeat("00", 32))
	if DecodeUMRCtrlSeg(b) != u || u.CheckFree() != UMRCtrlFlagCheckFree {
		t.Fatalf("UMR ctrl round trip %+v", DecodeUMRCtrlSeg(b))
	}
	m := MkeyContextSeg{Free: MkeyContextFree, AccessFlags: MkeyContextAccessFlagsRemoteWrite | MkeyContextAccessFlagsLocalRead,
		SF: 1, QPNMkey: 0x00abcd07, FlagsPD: 0x00000009, StartAddr: 0x1000, Len: 0x2000, BSFOctwordSize: 2,
		TranslationsOctwordSize: 4, LogPageSize: 12}
	mb := make([]byte, MkeyContextSegSize)
	m.Encode(mb)
	wantBytes(t, "mkey context", mb, `
		40002401 00abcd07 00000000 00000009
		00000000 00001000 00000000 00002000
		00000002 00000000 00000000 00000000
		00000000 00000004 0000000c 00000000`)
	if DecodeMkeyContextSeg(mb) != m || m.QPN() != 0xabcd || m.MkeyVariant() != 7 || m.PD() != 9 {
		t.Fatalf("mkey ctx round trip %+v", DecodeMkeyContextSeg(mb))
	}
}

// The golden WQEs: each written byte by byte as the provider's
// _mlx5_post_send (qp.c) lays out the work request named.
var goldenSend = []struct {
	name  string
	st    ST
	bytes string
	want  SendWQE
}{
	{
		// RC IBV_WR_SEND, two SGEs, IBV_SEND_SIGNALED|IBV_SEND_SOLICITED,
		// cur_post 0x0102, qp_num 0xabc.
		name: "RC SEND", st: STRC,
		bytes: `0001020a 000abc03 0000000a 00000000
			00000040 00001234 00007f00 00001000
			00000008 00005678 00007f00 00002000`,
		want: SendWQE{
			Ctrl: CtrlSeg{WQEIndex: 0x0102, Opcode: OpcodeSend, QPN: 0xabc, DS: 3, FMCESE: WQECtrlCQUpdate | WQECtrlSolicited},
			Data: []DataSeg{{0x40, 0x1234, 0x7f0000001000}, {8, 0x5678, 0x7f0000002000}},
		},
	},
	{
		// UC IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_INLINE of "hello",
		// IBV_SEND_FENCE|IBV_SEND_SIGNALED, imm_data bytes de ad be ef.
		name: "UC WRITE_IMM inline", st: STUC,
		bytes: `00000509 00001103 00000088 deadbeef
			00000001 00000000 00009999 00000000
			80000005 68656c6c 6f000000 00000000`,
		want: SendWQE{
			Ctrl:   CtrlSeg{WQEIndex: 5, Opcode: OpcodeRDMAWriteImm, QPN: 0x11, DS: 3, FMCESE: FenceModeSmallAndFence | WQECtrlCQUpdate, Imm: 0xdeadbeef},
			Segs:   HasRAddr | HasInline,
			RAddr:  RAddrSeg{RAddr: 0x100000000, RKey: 0x9999},
			Inline: []byte("hello"),
		},
	},
	{
		// RC IBV_WR_RDMA_READ into one SGE, unsignaled.
		name: "RC READ", st: STRC,
		bytes: `0000ff10 00002203 00000000 00000000
			00000000 0000a000 00000777 00000000
			00010000 00000303 00000000 00400000`,
		want: SendWQE{
			Ctrl:  CtrlSeg{WQEIndex: 0xff, Opcode: OpcodeRDMARead, QPN: 0x22, DS: 3},
			Segs:  HasRAddr,
			RAddr: RAddrSeg{RAddr: 0xa000, RKey: 0x777},
			Data:  []DataSeg{{0x10000, 0x303, 0x400000}},
		},
	},
	{
		// RC IBV_WR_ATOMIC_CMP_AND_SWP: set_atomic_seg puts swap in
		// swap_add and compare_add in compare; the data segment is
		// set_data_ptr_seg_atomic's (byte_count MLX5_ATOMIC_SIZE).
		name: "RC ATOMIC_CS", st: STRC,
		bytes: `00000711 00003304 00000008 00000000
			00000000 0000b000 00000888 00000000
			11111111 11111111 22222222 22222222
			00000008 00000404 00000000 00500000`,
		want: SendWQE{
			Ctrl:   CtrlSeg{WQEIndex: 7, Opcode: OpcodeAtomicCS, QPN: 0x33, DS: 4, FMCESE: WQECtrlCQUpdate},
			Segs:   HasRAddr | HasAtomic,
			RAddr:  RAddrSeg{RAddr: 0xb000, RKey: 0x888},
			Atomic: AtomicSeg{SwapAdd: 0x1111111111111111, Compare: 0x2222222222222222},
			Data:   []DataSeg{{8, 0x404, 0x500000}},
		},
	},
	{
		// RC IBV_WR_ATOMIC_FETCH_AND_ADD: the add value in swap_add;
		// compare is left as the ring held it (zero here).
		name: "RC ATOMIC_FA", st: STRC,
		bytes: `00000812 00003304 00000008 00000000
			00000000 0000b008 00000888 00000000
			00000000 00000001 00000000 00000000
			00000008 00000404 00000000 00500008`,
		want: SendWQE{
			Ctrl:   CtrlSeg{WQEIndex: 8, Opcode: OpcodeAtomicFA, QPN: 0x33, DS: 4, FMCESE: WQECtrlCQUpdate},
			Segs:   HasRAddr | HasAtomic,
			RAddr:  RAddrSeg{RAddr: 0xb008, RKey: 0x888},
			Atomic: AtomicSeg{SwapAdd: 1},
			Data:   []DataSeg{{8, 0x404, 0x500008}},
		},
	},
	{
		// UD IBV_WR_SEND_WITH_IMM to QPN 0x4444, Q_Key 0x11111111, an AH
		// with dlid 0x12, sl 3, static rate 0, no GRH; one SGE.
		name: "UD SEND_IMM", st: STUD,
		bytes: `00000a0b 00005505 00000008 01020304
			11111111 00000000 80004444 03000012
			00000000 00000000 00000000 00000000
			00000000 00000000 00000000 00000000
			00000100 00000505 00000000 00600000`,
		want: SendWQE{
			Ctrl: CtrlSeg{WQEIndex: 0x0a, Opcode: OpcodeSendImm, QPN: 0x55, DS: 5, FMCESE: WQECtrlCQUpdate, Imm: 0x01020304},
			Segs: HasAV,
			AV:   AV{QKey: 0x11111111, DQPDCT: ExtendedUDAV | 0x4444, StatRateSL: 3, RLID: 0x12},
			Data: []DataSeg{{0x100, 0x505, 0x600000}},
		},
	},
	{
		// XRC IBV_WR_SEND to remote SRQ 0x77 (struct mlx5_wqe_xrc_seg
		// first), one SGE.
		name: "XRC SEND", st: STXRC,
		bytes: `0000010a 00006603 00000008 00000000
			00000077 00000000 00000000 00000000
			00000010 00000606 00000000 00700000`,
		want: SendWQE{
			Ctrl:    CtrlSeg{WQEIndex: 1, Opcode: OpcodeSend, QPN: 0x66, DS: 3, FMCESE: WQECtrlCQUpdate},
			Segs:    HasXRC,
			XRCSRQN: 0x77,
			Data:    []DataSeg{{0x10, 0x606, 0x700000}},
		},
	},
	{
		// RC IBV_WR_SEND_WITH_INV of rkey 0x00001203 (htobe32 in imm),
		// no SGE: a zero-length send, ds 1.
		name: "RC SEND_INV empty", st: STRC,
		bytes: `00000201 00000101 00000008 00001203`,
		want: SendWQE{
			Ctrl: CtrlSeg{WQEIndex: 2, Opcode: OpcodeSendInval, QPN: 1, DS: 1, FMCESE: WQECtrlCQUpdate, Imm: 0x1203},
		},
	},
	{
		// RC IBV_WR_BIND_MW of a type-2 window (rkey 0x00012302 → new key
		// byte 03) over 0x1000 bytes at 0x8000 of MR lkey 0x4501, remote
		// write: set_bind_wr (umr ctrl, mkey context, 64-byte inline KLM),
		// ds 12, initiator small fence is the *next* WQE's.
		name: "RC BIND_MW type 2", st: STRC,
		bytes: `00000325 00000c0c 00000008 00012302
			b0000000 00040000 00000000 203c6041
			00000000 00000000 00000000 00000000
			00000000 00000000 00000000 00000000
			00002000 00000c03 00000000 00000000
			00000000 00008000 00000000 00001000
			00000000 00000000 00000000 00000000
			00000000 00000000 00000000 00000000
			00001000 00004501 00000000 00008000
			00000000 00000000 00000000 00000000
			00000000 00000000 00000000 00000000
			00000000 00000000 00000000 00000000`,
		want: SendWQE{
			Ctrl: CtrlSeg{WQEIndex: 3, Opcode: OpcodeUMR, QPN: 0xc, DS: 12, FMCESE: WQECtrlCQUpdate, Imm: 0x12302},
			Segs: HasUMR,
			UMRCtrl: UMRCtrlSeg{Flags: UMRCtrlFlagInline | UMRCtrlFlagTranslationOffset | UMRCtrlFlagCheckFree, KLMOctowords: 4,
				MkeyMask: MkeyMaskFree | MkeyMaskMkey | MkeyMaskQPN | MkeyMaskLen | MkeyMaskStartAddr | MkeyMaskAccessLocalWrite |
					MkeyMaskAccessRemoteRead | MkeyMaskAccessRemoteWrite | MkeyMaskAccessAtomic},
			Mkey: MkeyContextSeg{AccessFlags: MkeyContextAccessFlagsRemoteWrite, QPNMkey: 0xc03, StartAddr: 0x8000, Len: 0x1000},
		},
	},
}

// TestGoldenSendWQEs decodes each golden WQE, checks the decoded values,
// and that Encode writes the same bytes back.
func TestGoldenSendWQEs(t *testing.T) {
	for _, g := range goldenSend {
		t.Run(g.name, func(t *testing.T) {
			b := unhex(t, g.bytes)
			w, err := DecodeSendWQE(b, g.st, MaxDS)
			if err != nil {
				t.Fatal(err)
			}
			want := g.want
			if want.Segs&HasUMR != 0 {
				want.Translation = b[CtrlSegSize+UMRCtrlSegSize+MkeyContextSegSize:]
			}
			if diff := cmp.Diff(want, w, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("decoded (-want +got):\n%s", diff)
			}
			out := make([]byte, len(b))
			if n := w.Encode(out); n != len(b) || !cmp.Equal(out, b) {
				t.Fatalf("encoded %d bytes\n% x\nwant\n% x", n, out, b)
			}
			if int(w.Ctrl.DS)*SendWQEDS != len(b) {
				t.Fatalf("ds %d for %d bytes", w.Ctrl.DS, len(b))
			}
		})
	}
}

// TestSendWQEMalformed: WQEs the device refuses, each with the syndrome of
// its error CQE; the control segment is decoded all the same.
func TestSendWQEMalformed(t *testing.T) {
	ctrl := func(op uint8, ds uint8) string {
		b := make([]byte, 16)
		CtrlSeg{WQEIndex: 9, Opcode: op, QPN: 1, DS: ds}.Encode(b)
		return hex.EncodeToString(b)
	}
	raddr := "00000000 00001000 00000001 00000000"
	data := "00000008 00000100 00000000 00002000"
	inline := func(n int, pad int) string {
		b := make([]byte, pad)
		be.PutUint32(b, uint32(n)|InlineSeg)
		return hex.EncodeToString(b)
	}
	for _, c := range []struct {
		name  string
		st    ST
		maxDS int
		bytes string
	}{
		{"short", STRC, 63, "0000"},
		{"ds 0", STRC, 63, ctrl(OpcodeSend, 0)},
		{"ds above the QP's max", STRC, 2, ctrl(OpcodeSend, 3) + data + data},
		{"ds beyond the bytes", STRC, 63, ctrl(OpcodeSend, 3) + data},
		{"opmod", STRC, 63, "01000" + ctrl(OpcodeSend, 1)[5:]},
		{"unknown opcode", STRC, 63, ctrl(0x03, 1)},
		{"READ on UC", STUC, 63, ctrl(OpcodeRDMARead, 3) + raddr + data},
		{"atomic on UD", STUD, 63, ctrl(OpcodeAtomicCS, 4) + raddr + raddr + data},
		{"WRITE on UD", STUD, 63, ctrl(OpcodeRDMAWrite, 2) + raddr},
		{"UMR on UD", STUD, 63, ctrl(OpcodeUMR, 8) + strings.Repeat("00", 112)},
		{"SEND on REG_UMR", STRegUMR, 63, ctrl(OpcodeSend, 1)},
		{"TSO", STUD, 63, ctrl(OpcodeTSO, 1)},
		{"WRITE without raddr", STRC, 63, ctrl(OpcodeRDMAWrite, 1)},
		{"atomic without atomic seg", STRC, 63, ctrl(OpcodeAtomicFA, 2) + raddr},
		{"masked atomic, short seg", STRC, 63, ctrl(OpcodeAtomicMaskedCS, 3) + raddr + raddr},
		{"atomic, two data segs", STRC, 63, ctrl(OpcodeAtomicFA, 5) + raddr + raddr + data + data},
		{"READ inline", STRC, 63, ctrl(OpcodeRDMARead, 3) + raddr + inline(4, 16)},
		{"atomic inline", STRC, 63, ctrl(OpcodeAtomicCS, 4) + raddr + raddr + inline(8, 16)},
		{"inline longer than the WQE", STRC, 63, ctrl(OpcodeSend, 2) + inline(13, 16)},
		{"inline after data", STRC, 63, ctrl(OpcodeSend, 3) + data + inline(4, 16)},
		{"two inline segments", STRC, 63, ctrl(OpcodeSend, 3) + inline(4, 16) + inline(0, 16)},
		{"UD without AV", STUD, 63, ctrl(OpcodeSend, 2) + data},
		{"XRC without XRC seg", STXRC, 63, ctrl(OpcodeSend, 1)},
		{"UMR without mkey seg", STRC, 63, ctrl(OpcodeUMR, 4) + strings.Repeat("00", 48)},
		{"UMR translation mismatch", STRC, 63, ctrl(OpcodeUMR, 9) + "80000000 00020000" + strings.Repeat("00", 40+64+16)},
		{"UMR by pointer, no data segment", STRC, 63, ctrl(OpcodeUMR, 8) + "00000000 00020000" + strings.Repeat("00", 40+64)},
		{"UMR by pointer, two data segments", STRC, 63, ctrl(OpcodeUMR, 10) + "00000000 00020000" + strings.Repeat("00", 40+64) + data + data},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := unhex(t, c.bytes)
			w, err := DecodeSendWQE(b, c.st, c.maxDS)
			var we *WQEError
			if !errors.Is(err, ErrWQE) || !errors.As(err, &we) {
				t.Fatalf("err = %v, want a *WQEError", err)
			}
			if we.Syndrome != SyndromeLocalQPOpErr {
				t.Errorf("syndrome %#x", we.Syndrome)
			}
			if len(b) >= 16 && (w.Ctrl.WQEIndex != 9 || w.Ctrl.QPN != 1) && c.name != "opmod" {
				t.Errorf("control segment not decoded: %+v", w.Ctrl)
			}
		})
	}
}

// TestSendWQEAccepted: sequences the provider never builds but the format
// allows (zero-length inline, the masked atomics, the kernel's UMR with no
// translation, an atomic with no local buffer, NOP with padding).
func TestSendWQEAccepted(t *testing.T) {
	b := make([]byte, MaxDS*16)
	for _, c := range []struct {
		name string
		st   ST
		w    SendWQE
	}{
		{"inline 0 bytes", STRC, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeSend, DS: 2}, Segs: HasInline}},
		{"inline 12 bytes", STUD, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeSend, DS: 5}, Segs: HasAV | HasInline, Inline: []byte("123456789abc")}},
		// UCX's rc_mlx5 active message: its header inline, the payload
		// by data segments after it.
		{"inline then data", STRC, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeSend, DS: 4}, Segs: HasInline,
			Inline: []byte("ucx-hdr!"), Data: []DataSeg{{4096, 7, 0x10000}, {100, 7, 0x20000}}}},
		{"masked CS", STRC, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeAtomicMaskedCS, DS: 5}, Segs: HasRAddr | HasMaskedAtomic,
			Atomic: AtomicSeg{1, 2, 3, 4}, Data: []DataSeg{{8, 1, 2}}}},
		{"atomic, no data", STXRC, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeAtomicFA, DS: 4}, Segs: HasXRC | HasRAddr | HasAtomic, XRCSRQN: 5}},
		{"kernel REG_MR by pointer", STRC, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeUMR, DS: 9, FMCESE: WQECtrlCQUpdate, Imm: 0x2207},
			Segs: HasUMR, UMRCtrl: UMRCtrlSeg{Flags: UMRCtrlFlagCheckFree, KLMOctowords: 8, MkeyMask: MkeyMaskFree | MkeyMaskLen},
			Mkey: MkeyContextSeg{AccessFlags: 0x80 | MkeyContextAccessFlagsLocalRead | 1, QPNMkey: 0xffffff07, LogPageSize: 12},
			Data: []DataSeg{{128, 0x100, 0x12340000}}}},
		{"kernel UMR rereg", STRegUMR, SendWQE{Ctrl: CtrlSeg{Opcode: OpcodeUMR, DS: 8, FMCESE: FenceModeInitiatorSmall | WQECtrlCQUpdate, Imm: 0x1100},
			Segs: HasUMR, UMRCtrl: UMRCtrlSeg{Flags: UMRCtrlFlagInline | UMRCheckFree, MkeyMask: MkeyMaskPD | MkeyMaskAccessLocalRead}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := c.w.Encode(b)
			if n != int(c.w.Ctrl.DS)*16 {
				t.Fatalf("encoded %d bytes for ds %d", n, c.w.Ctrl.DS)
			}
			got, err := DecodeSendWQE(b[:n], c.st, MaxDS)
			if err != nil {
				t.Fatal(err)
			}
			if got.Segs&HasUMR != 0 {
				got.Translation = nil
			}
			if diff := cmp.Diff(c.w, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
	// A NOP's trailing segments are not decoded.
	CtrlSeg{Opcode: OpcodeNOP, DS: 4}.Encode(b)
	b[16] = 0xff
	if w, err := DecodeSendWQE(b[:64], STUD, MaxDS); err != nil || w.Segs != 0 || len(w.Data) != 0 {
		t.Fatalf("NOP: %+v %v", w, err)
	}
}

// TestSendWQEDecodeReuses: Decode reuses the WQE's storage (no allocation
// once it is large enough).
func TestSendWQEDecodeReuses(t *testing.T) {
	b := unhex(t, goldenSend[0].bytes)
	var w SendWQE
	if err := w.Decode(b, STRC, MaxDS); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = w.Decode(b, STRC, MaxDS) }); n != 0 {
		t.Errorf("%v allocations per decode", n)
	}
	if w.Length() != 0x48 {
		t.Errorf("length %d", w.Length())
	}
}

// TestSQ: the send queue's index arithmetic (mlx5.md §7.2): 16-bit WQEBB
// counters, a WQE that runs past the end continuing at byte 0.
func TestSQ(t *testing.T) {
	q := SQ{LogSize: 3} // 8 WQEBBs, 512 bytes
	if q.Size() != 512 || q.Offset(0xffff) != 7*64 || q.Offset(8) != 0 || q.Offset(9) != 64 {
		t.Fatalf("size %d offsets %d %d %d", q.Size(), q.Offset(0xffff), q.Offset(8), q.Offset(9))
	}
	for _, c := range []struct {
		c           uint16
		n           uint64
		off, n1, n2 uint64
	}{
		{0, 64, 0, 64, 0},
		{7, 128, 448, 64, 64},
		{0xffff, 256, 448, 64, 192},
		{6, 1008, 384, 128, 384},
	} {
		off, n1, n2 := q.Spans(c.c, c.n)
		if off != c.off || n1 != c.n1 || n2 != c.n2 {
			t.Errorf("Spans(%d, %d) = %d %d %d, want %d %d %d", c.c, c.n, off, n1, n2, c.off, c.n1, c.n2)
		}
	}
}

// TestSendWQEWraps: a WQE posted at the last WQEBB of the ring continues at
// its start (the provider's "if (seg == qend)"); copied out through
// SQ.Spans it decodes as posted.
func TestSendWQEWraps(t *testing.T) {
	q := SQ{LogSize: 2} // 4 WQEBBs
	ring := make([]byte, q.Size())
	w := SendWQE{Ctrl: CtrlSeg{WQEIndex: 0xffff, Opcode: OpcodeSend, QPN: 0x55, DS: 6, FMCESE: WQECtrlCQUpdate},
		Segs: HasAV | HasInline, AV: AV{QKey: 1, DQPDCT: ExtendedUDAV | 2}, Inline: []byte("0123456789abcdefghijklmn")}
	lin := make([]byte, 6*16)
	if n := w.Encode(lin); n != len(lin) {
		t.Fatalf("encoded %d bytes", n)
	}
	off, n1, n2 := q.Spans(w.Ctrl.WQEIndex, uint64(len(lin)))
	if off != 192 || n1 != 64 || n2 != 32 {
		t.Fatalf("spans %d %d %d", off, n1, n2)
	}
	copy(ring[off:off+n1], lin[:n1])
	copy(ring[:n2], lin[n1:])
	out := append(append([]byte(nil), ring[off:off+n1]...), ring[:n2]...)
	got, err := DecodeSendWQE(out, STUD, MaxDS)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if next := w.Ctrl.WQEIndex + w.Ctrl.WQEBBs(); next != 1 {
		t.Fatalf("next WQE at %d", next)
	}
}

// FuzzDecodeSendWQE: any bytes decode or fail with a *WQEError, never
// panic; what decodes encodes back to a WQE that decodes to the same value,
// byte for byte the same as the input wherever a field lies.
func FuzzDecodeSendWQE(f *testing.F) {
	for _, g := range goldenSend {
		f.Add(unhex(f, g.bytes), uint8(g.st), uint8(MaxDS))
	}
	f.Add(make([]byte, 16), uint8(STUD), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, st, maxDS uint8) {
		w, err := DecodeSendWQE(b, ST(st&0xf), int(maxDS))
		if err != nil {
			var we *WQEError
			if !errors.As(err, &we) || !errors.Is(err, ErrWQE) {
				t.Fatalf("error %v is not a *WQEError", err)
			}
			return
		}
		if int(w.Ctrl.DS) > int(maxDS) || int(w.Ctrl.DS) > MaxDS || int(w.Ctrl.DS)*16 > len(b) {
			t.Fatalf("accepted ds %d (max %d, %d bytes)", w.Ctrl.DS, maxDS, len(b))
		}
		if w.Ctrl.Opcode == OpcodeNOP {
			return
		}
		out := make([]byte, MaxDS*16)
		n := w.Encode(out)
		if n != int(w.Ctrl.DS)*16 {
			t.Fatalf("re-encoded %d bytes, ds %d", n, w.Ctrl.DS)
		}
		again, err := DecodeSendWQE(out[:n], ST(st&0xf), int(maxDS))
		if err != nil {
			t.Fatalf("re-encoded WQE refused: %v", err)
		}
		if diff := cmp.Diff(w, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		// Every field sits where the input had it: re-encoded bytes are the
		// input's, or zero (reserved bytes, padding), but for qpn_ds's
		// reserved bits 7:6.
		for i := range n {
			want := b[i]
			if i == 7 {
				want &= 0x3f
			}
			if out[i] != want && out[i] != 0 {
				t.Fatalf("byte %d re-encoded %#x, input %#x", i, out[i], b[i])
			}
		}
	})
}
