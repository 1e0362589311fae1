package mlx5

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// kernelPair is rcPair with b's QP a kernel ULP's (fre = 1), and the DMA
// key of b's PD (its local_dma_lkey).
func kernelPair(t *testing.T) (*rcEnd, *rcEnd, uint32) {
	t.Helper()
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	d, drv, ib, _ := ibProbed(t, Config{Name: "hca1", Subnet: sub, NodeGUID: 0x0002c90300000200})
	b := addEndWith(t, d, drv, ib, func(q *mlx5test.QPArgs) { q.Fre = true })
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	dma, err := b.drv.DMAMkey(b.pd)
	if err != nil {
		t.Fatal(err)
	}
	return a, b, dma.Key
}

// allocFRMR is ib_alloc_mr's CREATE_MKEY on e's PD: free, umr_en, MTT
// (IB_MR_TYPE_MEM_REG, 4 KiB pages) or KLM (IB_MR_TYPE_SG_GAPS) with
// room for ndescs descriptors.
func allocFRMR(t *testing.T, e *rcEnd, klm bool, ndescs uint32) uint32 {
	t.Helper()
	a := mlx5test.MkeyArgs{PD: e.pd, Mode: ifc.MkcAccessModeMTT, Free: true, LogPageSize: 12, Octwords: ndescs}
	if klm {
		a = mlx5test.MkeyArgs{PD: e.pd, Mode: ifc.MkcAccessModeKLM, Free: true, Octwords: ndescs}
	}
	k, err := e.drv.CreateMkey(e.drv.CreateMkeyIn(a))
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

func mtts(pages ...uint64) []byte {
	b := make([]byte, 8*len(pages))
	for i, p := range pages {
		binary.BigEndian.PutUint64(b[8*i:], p|3) // MLX5_EN_RD | MLX5_EN_WR
	}
	return b
}

type klmEntry struct {
	n   uint32
	key uint32
	va  uint64
}

func klms(es ...klmEntry) []byte {
	b := make([]byte, 16*len(es))
	for i, e := range es {
		binary.BigEndian.PutUint32(b[16*i:], e.n)
		binary.BigEndian.PutUint32(b[16*i+4:], e.key)
		binary.BigEndian.PutUint64(b[16*i+8:], e.va)
	}
	return b
}

// wantUMR checks a successful REQ CQE of opcode UMR for WQE idx.
func wantUMR(t *testing.T, e *rcEnd, idx uint16, cqe []byte) {
	t.Helper()
	checkReq(t, cqe, e.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
}

// wantErrCQE checks an error CQE of syndrome synd.
func wantErrCQE(t *testing.T, cqe []byte, synd uint8) {
	t.Helper()
	if ec := uverbs.DecodeErrCQE(cqe); ec.Opcode != uverbs.CQEReqErr || ec.Syndrome != synd {
		t.Fatalf("CQE %+v, want an error of syndrome %#x", ec, synd)
	}
}

const rwAccess = 0x3 // lw | rw (MkeyArgs numbering)

// TestFRWRMTT: the kernel's fast registration of an MTT MR on a ULP's QP
// (set_reg_wr), inline and by pointer, what a peer's RDMA reaches through
// it, LOCAL_INV (set_linv_wr), the "fail if not free" check, and remote
// invalidation by SEND_WITH_INV.
func TestFRWRMTT(t *testing.T) {
	a, b, dmaKey := kernelPair(t)
	key := allocFRMR(t, b, false, 32)
	const iova = 0x7f0000001000
	// Inline: two pages of b's buffer, swapped, at IOVA iova.
	key = mlx5test.IncRKey(key)
	idx, cqe := b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, iova, 8192, 12, mtts(b.data+12288, b.data+4096), nil))
	wantUMR(t, b, idx, cqe)
	copy(a.mem(32<<10, 64), bytes.Repeat([]byte{0xA1}, 64))
	wantWriteOK(t, rdma(t, a, false, key, iova+4096-32, 64))
	if !bytes.Equal(b.mem(12288+4064, 32), a.mem(32<<10, 32)) || !bytes.Equal(b.mem(4096, 32), a.mem(32<<10+32, 32)) {
		t.Fatal("the WRITE did not land where the MR's pages are")
	}
	// Live: a second REG_MR must fail ("fail if not free"); the QP errs.
	// Tested last. LOCAL_INV first: the key then reaches nothing.
	idx, cqe = b.post(t, mlx5test.KernelLocalInvWQE(key))
	wantUMR(t, b, idx, cqe)
	wantRemoteAccess(t, rdma(t, a, false, key, iova, 64))
	reconnect(t, a, b)

	// By pointer: a 16-entry list in b's buffer, through the PD's DMA key.
	pages := make([]uint64, 16)
	for i := range pages {
		pages[i] = b.data + uint64(i%8)<<12
	}
	list := mtts(pages...)
	copy(b.mem(48<<10, len(list)), list)
	key = mlx5test.IncRKey(key)
	ptr := uverbs.DataSeg{Addr: b.data + 48<<10, ByteCount: 128, LKey: dmaKey}
	idx, cqe = b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, iova, 16<<12, 12, nil, &ptr))
	wantUMR(t, b, idx, cqe)
	copy(a.mem(32<<10, 64), bytes.Repeat([]byte{0xB2}, 64))
	wantWriteOK(t, rdma(t, a, false, key, iova+9<<12, 64)) // page 9: b's page 1
	if !bytes.Equal(b.mem(4096, 64), a.mem(32<<10, 64)) {
		t.Fatal("the WRITE through the pointed-to list missed page 9")
	}
	if got := mkeyOf(b, key); !got.valid || got.start != iova || got.length != 16<<12 {
		t.Fatalf("registered mkey %+v", got)
	}

	// SEND_WITH_INV from the peer frees it (en_rinval).
	b.drv.PostRecv(b.wq, b.seg(40<<10, 256))
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSendInval, FMCESE: signaled, Imm: key},
		Data: []uverbs.DataSeg{a.seg(32<<10, 16)}})
	wantWriteOK(t, a.poll(t))
	if c := uverbs.DecodeCQE(b.poll(t)); c.Opcode != uverbs.CQERespSendInv || c.ImmInvalPkey != key {
		t.Fatalf("receive CQE %+v, want SEND_WITH_INV of %#x", c, key)
	}
	if mkeyOf(b, key).valid {
		t.Fatal("SEND_WITH_INV left the fast-registered mkey valid")
	}

	// Registered again, then once more while live: LOC_PROT_ERR.
	key = mlx5test.IncRKey(key)
	idx, cqe = b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, iova, 4096, 12, mtts(b.data), nil))
	wantUMR(t, b, idx, cqe)
	st := mkeyOf(b, key)
	_, cqe = b.post(t, mlx5test.RegMRWQE(mlx5test.IncRKey(key), mlx5test.ModeMTT, rwAccess, iova, 4096, 12, mtts(b.data), nil))
	wantErrCQE(t, cqe, uverbs.SyndromeLocalProtErr)
	if mkeyOf(b, key) != st {
		t.Fatal("a refused REG_MR changed the mkey")
	}
}

// TestFRWRKLM: an SG_GAPS MR (KLM mkey, as nvme-rdma allocates on a
// device with IBK_SG_GAPS_REG) fast-registered over three byte ranges of
// the PD's DMA key: a peer's WRITE across it lands in the three ranges in
// order, a READ gathers them; entries naming another PD's key, or more
// bytes than the MR's length, are refused.
func TestFRWRKLM(t *testing.T) {
	a, b, dmaKey := kernelPair(t)
	pinned := func() uint64 { b.d.core.Lock(); defer b.d.core.Unlock(); return b.d.fn.pins.Pinned() }
	key := mlx5test.IncRKey(allocFRMR(t, b, true, 4))
	const iova = 0x10000
	list := klms(klmEntry{50, dmaKey, b.data + 100}, klmEntry{30, dmaKey, b.data + 1000}, klmEntry{200, dmaKey, b.data + 5000})
	idx, cqe := b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeKLM, rwAccess|4, iova, 280, 0, list, nil))
	wantUMR(t, b, idx, cqe)
	msg := make([]byte, 256)
	for i := range msg {
		msg[i] = byte(i)
	}
	copy(a.mem(32<<10, 256), msg)
	wantWriteOK(t, rdma(t, a, false, key, iova+10, 256))
	got := append(append(append([]byte{}, b.mem(110, 40)...), b.mem(1000, 30)...), b.mem(5000, 186)...)
	if !bytes.Equal(got, msg) {
		t.Fatalf("the WRITE through the KLM MR landed as % x", got[:48])
	}
	clear(a.mem(32<<10, 256))
	cqe = rdma(t, a, true, key, iova+10, 256)
	wantWriteOK(t, cqe)
	if !bytes.Equal(a.mem(32<<10, 256), msg) {
		t.Fatal("the READ through the KLM MR gathered other bytes")
	}
	// Past the MR's 280 bytes: a remote access error.
	wantRemoteAccess(t, rdma(t, a, false, key, iova+200, 100))
	reconnect(t, a, b)
	idx, cqe = b.post(t, mlx5test.KernelLocalInvWQE(key))
	wantUMR(t, b, idx, cqe)

	// Another PD's key in the list: refused, nothing changes.
	other := b.another(t)
	otherDMA, err := b.drv.DMAMkey(other.pd)
	if err != nil {
		t.Fatal(err)
	}
	st := mkeyOf(b, key)
	_, cqe = b.post(t, mlx5test.RegMRWQE(mlx5test.IncRKey(key), mlx5test.ModeKLM, rwAccess, iova, 64, 0,
		klms(klmEntry{64, otherDMA.Key, b.data}), nil))
	wantErrCQE(t, cqe, uverbs.SyndromeLocalProtErr)
	if mkeyOf(b, key) != st {
		t.Fatal("a refused REG_MR changed the mkey")
	}
	// Its 3-entry KLM list counts in the page-list budget until
	// DESTROY_MKEY.
	before := pinned()
	if err := b.drv.DestroyMkey(mlx5test.Mkey{Key: key}); err != nil {
		t.Fatal(err)
	}
	if got := pinned(); before-got != 3 {
		t.Fatalf("DESTROY_MKEY of the KLM MR released %d page-list entries, want its 3", before-got)
	}
}

// TestFRWRUserQP: a user QP (fre = 0) cannot fast-register: its UMR WQEs
// are memory-window binds, and a REG_MR-shaped one on a free MTT mkey is
// refused (it would let user space point an mkey at any guest page).
func TestFRWRUserQP(t *testing.T) {
	a, b := rcPair(t)
	key := mlx5test.IncRKey(allocFRMR(t, b, false, 8))
	_, cqe := b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, 0x1000, 4096, 12, mtts(0), nil))
	if ec := uverbs.DecodeErrCQE(cqe); ec.Opcode != uverbs.CQEReqErr {
		t.Fatalf("a user QP's REG_MR completed: %+v", uverbs.DecodeCQE(cqe))
	}
	if mkeyOf(b, key).valid {
		t.Fatal("a user QP's REG_MR made the mkey valid")
	}
	reconnect(t, a, b)
	wantRemoteAccess(t, rdma(t, a, false, key, 0x1000, 64))
}

// TestUMRTranslationLoad: the MR cache's registration on the REG_UMR QP
// (mlx5r_umr_update_mr_pas): a free cached mkey of the UMR PD gets its
// MTT entries in two pointed-to chunks (the second at an offset), the
// last WQE enabling it in the user's PD; a peer's WRITE lands through
// it; the revoke frees it; chunks past its capacity, an enable with too
// few entries or a misaligned one are refused and change nothing.
func TestUMRTranslationLoad(t *testing.T) {
	a, b := rcPair(t)
	u := umrOf(t, b)
	umrDMA, err := b.drv.DMAMkey(b.ib.UMRPD)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := b.drv.CreateMkey(b.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: b.ib.UMRPD, Mode: ifc.MkcAccessModeMTT,
		Free: true, LogPageSize: 12, Octwords: 8})) // 16 entries
	if err != nil {
		t.Fatal(err)
	}
	key := cached.Key
	pages := make([]uint64, 16)
	for i := range pages {
		pages[i] = b.data + uint64(15-i)<<12
	}
	copy(b.mem(48<<10, 128), mtts(pages...))
	chunk := func(i int) uverbs.DataSeg {
		return uverbs.DataSeg{Addr: b.data + 48<<10 + uint64(64*i), ByteCount: 64, LKey: umrDMA.Key}
	}
	const iova = 0x400000
	// Refused first: the enable before the entries are there, a chunk past
	// the capacity.
	st := mkeyOf(b, key)
	umrFails(t, b, u, mlx5test.XLTWQE(key, chunk(0), 0, true, b.pd, allAccess, iova, 16<<12, 12), uverbs.SyndromeLocalProtErr)
	umrFails(t, b, u, mlx5test.XLTWQE(key, chunk(0), 6, false, b.pd, allAccess, 0, 0, 0), uverbs.SyndromeLocalProtErr)
	if mkeyOf(b, key) != st {
		t.Fatal("a refused UMR changed the mkey")
	}
	umrOK(t, b, u, mlx5test.XLTWQE(key, chunk(0), 0, false, b.pd, allAccess, 0, 0, 0))
	umrOK(t, b, u, mlx5test.XLTWQE(key, chunk(1), 4, true, b.pd, allAccess, iova, 16<<12, 12))
	got := mkeyOf(b, key)
	if !got.valid || got.pd != b.pd || got.start != iova || got.length != 16<<12 || got.shift != 12 {
		t.Fatalf("enabled mkey %+v", got)
	}
	copy(a.mem(32<<10, 64), bytes.Repeat([]byte{0xC3}, 64))
	wantWriteOK(t, rdma(t, a, false, key, iova+14<<12+8, 64)) // page 14: b's page 1
	if !bytes.Equal(b.mem(4096+8, 64), a.mem(32<<10, 64)) {
		t.Fatal("the WRITE missed the loaded page")
	}
	umrOK(t, b, u, mlx5test.RevokeWQE(key, b.ib.UMRPD))
	wantRemoteAccess(t, rdma(t, a, false, key, iova, 64))
	// Re-enabled over 8 KiB pages, one entry misaligned: refused.
	mis := b.data + 4096
	if mis%8192 == 0 {
		mis = b.data
	}
	copy(b.mem(48<<10, 8), mtts(mis))
	umrFails(t, b, u, mlx5test.XLTWQE(key, chunk(0), 0, true, b.pd, allAccess, iova, 8192, 13), uverbs.SyndromeLocalProtErr)
	if mkeyOf(b, key).valid {
		t.Fatal("a refused enable made the mkey valid")
	}
	// The cache's smallest mkeys hold 4 entries (2 octowords), and their
	// one load carries 8 (64 bytes, zero-padded): taken.
	small, err := b.drv.CreateMkey(b.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: b.ib.UMRPD, Mode: ifc.MkcAccessModeMTT,
		Free: true, LogPageSize: 12, Octwords: 2}))
	if err != nil {
		t.Fatal(err)
	}
	copy(b.mem(48<<10, 64), append(mtts(b.data), make([]byte, 56)...))
	umrOK(t, b, u, mlx5test.XLTWQE(small.Key, chunk(0), 0, true, b.pd, allAccess, iova, 4096, 12))
	if !mkeyOf(b, small.Key).valid {
		t.Fatal("the small mkey is not enabled")
	}
}

// TestFRWROtherPD: a kernel QP fast-registers and invalidates only the
// MRs of its own PD: a REG_MR or a LOCAL_INV of another PD's MR (whose
// key it may have learnt) completes with LOC_PROT_ERR and leaves it as
// it was.
func TestFRWROtherPD(t *testing.T) {
	a, b, _ := kernelPair(t)
	other := addEndWith(t, b.d, b.drv, b.ib, func(q *mlx5test.QPArgs) { q.Fre = true }) // a kernel QP of another PD
	other.connect(t, a.lid, a.wq.Q.QPN)                                                 // RTS: its UMR WQEs run
	key := mlx5test.IncRKey(allocFRMR(t, other, false, 8))
	_, cqe := b.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, 0x1000, 4096, 12, mtts(b.data), nil))
	wantErrCQE(t, cqe, uverbs.SyndromeLocalProtErr)
	if mkeyOf(b, key).valid {
		t.Fatal("another PD's QP fast-registered the MR")
	}
	// Registered live by its own PD's QP; then a LOCAL_INV from b's.
	idx, cqe := other.post(t, mlx5test.RegMRWQE(key, mlx5test.ModeMTT, rwAccess, 0x1000, 4096, 12, mtts(other.data), nil))
	wantUMR(t, other, idx, cqe)
	reconnect(t, a, b)
	st := mkeyOf(b, key)
	_, cqe = b.post(t, mlx5test.KernelLocalInvWQE(key))
	wantErrCQE(t, cqe, uverbs.SyndromeLocalProtErr)
	if got := mkeyOf(b, key); got != st || !got.valid {
		t.Fatalf("another PD's LOCAL_INV changed the MR: %+v, was %+v", got, st)
	}
}

// TestDrainRQ: mlx5_ib_drain_rq, which every kernel ULP runs at QP
// teardown: the QP to ERR, then one receive posted (the doorbell record
// moved, no doorbell rung: there is none for receives), then a wait for
// its flush CQE without a timeout. The device reads the doorbell record
// of a QP in ERR on the QP's timer and flushes it; again for a second
// one.
func TestDrainRQ(t *testing.T) {
	_, b := rcPair(t)
	if err := b.drv.ToERR(b.wq.Q); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		idx := b.wq.RQPI
		b.drv.PostRecv(b.wq, b.seg(0, 64))
		ec := uverbs.DecodeErrCQE(b.poll(t))
		if ec.Opcode != uverbs.CQERespErr || ec.Syndrome != uverbs.SyndromeWRFlushErr || ec.WQECounter != idx {
			t.Fatalf("receive %d posted in ERR: CQE %+v, want its flush", i, ec)
		}
	}
}
