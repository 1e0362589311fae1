package mlx5

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// umrMkey is the fuzzer's model of an mkey: what a UMR may change, and
// what decides whether it may (umr_en, a translation to enable).
type umrMkey struct {
	pd, access, key uint32
	valid           bool
	umrEn           bool
	window          bool // a memory window: kernel UMRs leave it alone (mw.go)
	start, length   uint64
	shift           uint8
	npages          int       // MTT entries loaded
	pages           [4]uint64 // the first of them
}

// umrFuzzMasks are the mkey_mask bits the fuzzer's masks draw from, the
// ones the device implements and others.
var umrFuzzMasks = [16]uint64{
	uverbs.MkeyMaskAccessLocalRead, uverbs.MkeyMaskAccessLocalWrite, uverbs.MkeyMaskAccessRemoteRead,
	uverbs.MkeyMaskAccessRemoteWrite, uverbs.MkeyMaskAccessAtomic, uverbs.MkeyMaskPD, uverbs.MkeyMaskFree,
	uverbs.MkeyMaskMkey, uverbs.MkeyMaskLen, uverbs.MkeyMaskPageSize, uverbs.MkeyMaskStartAddr,
	uverbs.MkeyMaskQPN, uverbs.MkeyMaskEnRinval, 1 << 25, 1 << 47, 1 << 63,
}

// umrExpect is the model's outcome of a UMR on the mkeys ms: whether it
// succeeds, and the target's index and state after it. It follows the
// spec's reading (§6.4, §7.5.7) step by step, not the device's code.
func umrExpect(ms map[uint32]umrMkey, pds map[uint32]bool, w *uverbs.SendWQE) (bool, uint32, umrMkey) {
	u, s := w.UMRCtrl, w.Mkey
	idx := w.Ctrl.Imm >> 8
	m, exists := ms[idx]
	implemented := uint64(0)
	for _, b := range umrFuzzMasks[:11] {
		implemented |= b
	}
	if u.Flags&0x0f != 0 || u.Flags&0x60 == 0x60 || u.KLMOctowords != 0 ||
		u.MkeyMask&^implemented != 0 ||
		u.MkeyMask&uverbs.MkeyMaskAccessLocalRead != 0 && s.AccessFlags&0x04 == 0 {
		return false, idx, m
	}
	if !exists || u.MkeyMask&uverbs.MkeyMaskMkey == 0 && m.key != w.Ctrl.Imm || !m.umrEn || m.window {
		return false, idx, m
	}
	if mode := s.AccessFlags & 3; mode == 2 {
		return false, idx, m // a KLM access mode for an MTT mkey
	}
	if u.Flags&0x60 == 0x40 && !m.valid || u.Flags&0x60 == 0x20 && m.valid {
		return false, idx, m
	}
	n := m
	if u.MkeyMask&uverbs.MkeyMaskPD != 0 {
		if !pds[s.PD()] {
			return false, idx, m
		}
		n.pd = s.PD()
	}
	for i, flag := range []uint32{mr.LocalWrite, mr.RemoteRead, mr.RemoteWrite, mr.RemoteAtomic} {
		// mask bits 18..21 and access_flags bits 3..6, in the same order
		if u.MkeyMask&(1<<(18+i)) != 0 {
			n.access &^= flag
			if s.AccessFlags&(1<<(3+i)) != 0 {
				n.access |= flag
			}
		}
	}
	if u.MkeyMask&uverbs.MkeyMaskFree != 0 {
		n.valid = s.Free&0x40 == 0
	}
	if u.MkeyMask&uverbs.MkeyMaskMkey != 0 {
		n.key = idx<<8 | uint32(s.QPNMkey&0xff)
	}
	if u.MkeyMask&uverbs.MkeyMaskStartAddr != 0 {
		n.start = s.StartAddr
	}
	if u.MkeyMask&uverbs.MkeyMaskLen != 0 {
		n.length = s.Len
	}
	if u.MkeyMask&uverbs.MkeyMaskPageSize != 0 {
		if lps := s.LogPageSize & 0x3f; lps < 12 || lps > 30 {
			return false, idx, m
		} else {
			n.shift = lps
		}
	}
	if n.valid {
		// A live MTT mkey: a range, and a loaded, aligned page for each of
		// its pages.
		if n.length == 0 || n.length > 1<<46 || n.start+n.length < n.start || n.shift == 0 {
			return false, idx, m
		}
		npages := (n.start+n.length-1)>>n.shift - n.start>>n.shift + 1
		if npages > uint64(n.npages) {
			return false, idx, m
		}
		for _, p := range n.pages[:npages] {
			if p&(1<<n.shift-1) != 0 {
				return false, idx, m
			}
		}
	}
	return true, idx, n
}

// FuzzKernelUMR posts kernel UMR WQEs built from the program on the
// REG_UMR QP of a device holding live MTT mkeys (umr_en), a free one, a
// memory window and the kernel's DMA keys (umr_en 0), over PDs some of
// which exist. Oracle: each completes with the model's outcome (a REQ
// CQE of opcode UMR, or an error CQE and then the QP in ERR, recovered
// as the kernel does); every mkey's PD, access, validity and key are the
// model's after each, the target's generation changes exactly when it
// changed, no other mkey's at all; the PDs' reference counts follow the
// mkeys; the device never dies.
func FuzzKernelUMR(f *testing.F) {
	f.Add([]byte{0, 0xc0, 0x3f, 0, 0, 0x7c, 1, 0})          // rereg of the first key
	f.Add([]byte{1, 0x80, 0x60, 0, 0x40, 0, 3, 0})          // revoke of the second
	f.Add([]byte{2, 0xa0, 0xe0, 0, 0, 0x04, 0, 0, 2, 0x20}) // enable a free mkey: no translation
	f.Add([]byte{8, 0xc0, 0x3f, 0xff, 0, 0x7c, 1, 0x83})
	f.Add([]byte{3, 0x00, 0x30, 0, 0, 0x30, 0, 0}) // PD and atomic of the memory window: refused
	f.Fuzz(func(t *testing.T, prog []byte) {
		d, drv, ib, _ := ibProbed(t, Config{})
		defer d.Close()
		u, err := drv.UMRResources()
		if err != nil {
			t.Fatal(err)
		}
		hold := func(fn func()) { d.core.Lock(); defer d.core.Unlock(); fn() }
		u.WQ.Hold = hold
		ms := map[uint32]umrMkey{}
		pds := map[uint32]bool{ib.UMRPD: true, ib.MADPD: true, ib.P0: true}
		var keys []uint32
		var pdList []uint32
		for range 3 {
			p, err := drv.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			pds[p] = true
			pdList = append(pdList, p)
		}
		pdList = append(pdList, ib.UMRPD, 0, 0x77777)
		data := drv.Alloc(1<<14, 4096)
		for i, a := range []mlx5test.MkeyArgs{
			{PD: pdList[0], Mode: ifc.MkcAccessModeMTT, Access: 0xf, Start: data, Len: 1 << 14, LogPageSize: 12,
				MTT: []uint64{data, data + 4096, data + 8192, data + 12288}},
			{PD: pdList[1], Mode: ifc.MkcAccessModeMTT, Access: 0x1, Start: data, Len: 4096, LogPageSize: 12, MTT: []uint64{data}},
			{PD: pdList[0], Mode: ifc.MkcAccessModeMTT, Access: 0x1, Free: true, LogPageSize: 12, Octwords: 8},
			{PD: pdList[2], Mode: ifc.MkcAccessModeKLM, Free: true, Octwords: 4},
		} {
			k, err := drv.CreateMkey(drv.CreateMkeyIn(a))
			if err != nil {
				t.Fatalf("mkey %d: %v", i, err)
			}
			access := uint32(0)
			for bit, flag := range []uint32{mr.LocalWrite, mr.RemoteWrite, mr.RemoteRead, mr.RemoteAtomic} {
				if a.Access&(1<<bit) != 0 {
					access |= flag
				}
			}
			m := umrMkey{pd: a.PD, access: access, key: k.Key, valid: !a.Free, umrEn: true,
				window: a.Mode == ifc.MkcAccessModeKLM, start: a.Start, length: a.Len, npages: len(a.MTT)}
			if a.Mode == ifc.MkcAccessModeMTT {
				m.shift = uint8(a.LogPageSize)
			}
			copy(m.pages[:], a.MTT)
			ms[k.Key>>8] = m
			keys = append(keys, k.Key)
		}
		for _, k := range []mlx5test.Mkey{ib.UMRKey, ib.P0Key, ib.MADKey} {
			ms[k.Key>>8] = umrMkey{pd: mkeyOfDev(d, k.Key).pd, access: mr.LocalWrite, key: k.Key, valid: true}
			keys = append(keys, k.Key)
		}
		refs := func() map[uint32]int {
			d.core.Lock()
			defer d.core.Unlock()
			r := map[uint32]int{}
			for p := range pds {
				r[p] = d.fn.obj.pds.Get(p).refs
			}
			return r
		}
		baseRefs, baseMkeys := refs(), map[uint32]int{}
		for _, m := range ms {
			baseMkeys[m.pd]++
		}
		gens := map[uint32]uint64{}
		for idx, m := range ms {
			gens[idx] = mkeyOfDev(d, m.key).gen
		}
		for steps := 0; len(prog) >= 8 && steps < 12; steps++ {
			b := prog[:8]
			prog = prog[8:]
			var key uint32
			switch k := keys[int(b[0]&0x7f)%len(keys)]; {
			case b[0]&0x80 == 0:
				key = ms[k>>8].key // the current key
			case b[0]&0x40 == 0:
				key = k ^ uint32(b[7]) // another variant
			default:
				key = uint32(b[0]) << 12 // most likely no mkey
			}
			var mask uint64
			sel := uint16(b[2]) | uint16(b[3])<<8
			for i, m := range umrFuzzMasks {
				if sel&(1<<i) != 0 {
					mask |= m
				}
			}
			ctrl := uverbs.UMRCtrlSeg{Flags: b[1], MkeyMask: mask}
			seg := uverbs.MkeyContextSeg{Free: b[4], AccessFlags: b[5], FlagsPD: pdList[int(b[6])%len(pdList)],
				QPNMkey: 0xffffff00 | uint32(b[7]),
				// A range of the mkeys' pages (none to 63 KiB) in pages of
				// 4 to 32 KiB.
				StartAddr: data, Len: uint64(b[4]&0x3f) << 10, LogPageSize: 12 + b[6]>>4&3}
			switch b[7] & 0xc0 {
			case 0xc0:
				ctrl.TranslationOffset = uint16(b[7] & 3)
			case 0x80:
				ctrl.KLMOctowords = uint16(b[7] & 3) // none follows: malformed unless 0
			}
			w := mlx5test.UMRWQE(key, ctrl, seg)
			want, idx, next := umrExpect(ms, pds, &w)
			changed := want && next != ms[idx]
			drv.PostUMR(u, &w)
			d.Sync()
			var cqe []byte
			var polled bool
			hold(func() { cqe, polled = drv.PollUMR(u) })
			if !polled {
				t.Fatalf("step %d: no CQE for UMR %+v", steps, w.UMRCtrl)
			}
			got := cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq
			if got != want {
				t.Fatalf("step %d: UMR on %#x ctrl %+v seg %+v: completed ok=%v, the model says %v (%+v)",
					steps, key, w.UMRCtrl, w.Mkey, got, want, uverbs.DecodeErrCQE(cqe))
			}
			if changed {
				ms[idx] = next
			}
			if !got {
				if _, st, _ := d.QPState(u.WQ.Q.QPN); st != transport.StateErr {
					t.Fatalf("step %d: UMR QP %v after an error CQE", steps, st)
				}
				if err := drv.UMRRecover(u); err != nil {
					t.Fatalf("step %d: recovery: %v", steps, err)
				}
			}
			for i, m := range ms {
				s := mkeyOfDev(d, m.key)
				dev := umrMkey{pd: s.pd, access: s.access, key: s.key, valid: s.valid, umrEn: m.umrEn, window: m.window,
					start: s.start, length: s.length, shift: s.shift, npages: m.npages, pages: m.pages}
				if dev != m {
					t.Fatalf("step %d: mkey %#x is %+v, the model's %+v", steps, i, dev, m)
				}
				if (s.gen != gens[i]) != (changed && i == idx) {
					t.Fatalf("step %d: mkey %#x: generation %d, was %d (changed by the UMR: %v)", steps, i, s.gen, gens[i], changed && i == idx)
				}
				gens[i] = s.gen
			}
		}
		now, nowMkeys := refs(), map[uint32]int{}
		for _, m := range ms {
			nowMkeys[m.pd]++
		}
		for p := range pds {
			if want := baseRefs[p] - baseMkeys[p] + nowMkeys[p]; now[p] != want {
				t.Fatalf("PD %#x: %d references, want %d", p, now[p], want)
			}
		}
		d.core.Lock()
		fatal := d.seg.synd != 0
		d.core.Unlock()
		if fatal {
			t.Fatal("the device died")
		}
	})
}

// mkeyOfDev is what a UMR may change of the mkey key names (by index).
func mkeyOfDev(d *Device, key uint32) mkeyState {
	d.core.Lock()
	defer d.core.Unlock()
	r := d.fn.obj.Region(mr.Handle(key))
	if r == nil {
		return mkeyState{}
	}
	return mkeyState{pd: r.PD, access: r.Access, key: r.LKey, valid: r.Valid, gen: r.Gen, start: r.Start, length: r.Length, shift: r.PageShift}
}
