package mlx5

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// frwrModel is the fuzzer's model of a fast-register MR: its key, whether
// it is registered, the range and access the last registration gave it,
// and its translation (MTT: every entry loaded so far, stale ones
// included, as the device keeps them; KLM: the last list's ranges, as
// guest addresses of the PD's DMA key).
type frwrModel struct {
	klm     bool
	key     uint32
	valid   bool
	iova    uint64
	length  uint64
	write   bool // remote write granted
	entries [16]uint64
	ranges  []frwrRange
}

type frwrRange struct{ gpa, n uint64 }

// gpaOf is the guest address of byte off of the MR (off < length).
func (m *frwrModel) gpaOf(off uint64) uint64 {
	if m.klm {
		for _, r := range m.ranges {
			if off < r.n {
				return r.gpa + off
			}
			off -= r.n
		}
		return 0
	}
	at := m.iova&0xfff + off
	return m.entries[at>>12] + at&0xfff
}

// FuzzFastReg posts the kernel's fast registrations (IB_WR_REG_MR: MTT
// lists inline or through the PD's DMA key, KLM lists inline) and
// LOCAL_INVs on a kernel ULP's QP (fre), built from the program, on an
// MTT and a KLM fast-register MR, each followed by a peer's 8-byte RDMA
// WRITE through the MR's key at an offset of the program's. Oracle: each
// UMR completes as the model says (a registration needs the MR free, a
// page for every page of its range, or KLM ranges covering it; a
// LOCAL_INV the MR's current key), the device's mkey is the model's
// (valid, IOVA, length), and the WRITE succeeds exactly when the model's
// MR is registered with remote write over the bytes written, landing at
// the guest addresses the model's translation gives; the device never
// dies.
func FuzzFastReg(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 0x08, 0x0f, 0, 4, 2, 2, 0, 0, 0, 0, 0, 0})    // register, write, invalidate
	f.Add([]byte{1, 1, 2, 0x55, 0x10, 0x0f, 0, 1, 3, 2, 0, 0, 0, 0, 0, 0}) // KLM: register, invalidate
	f.Add([]byte{0, 1, 0x83, 9, 0xfc, 0x0f, 0, 200, 0, 2, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 1, 0, 0x20, 0x0f, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0}) // too short, then live
	f.Fuzz(func(t *testing.T, prog []byte) {
		a, b, dmaKey := kernelPair(t)
		defer a.d.Close()
		defer b.d.Close()
		ms := [2]*frwrModel{{key: allocFRMR(t, b, false, 8)}, {klm: true, key: allocFRMR(t, b, true, 4)}}
		list := b.drv.Alloc(128, 64)
		for steps := 0; len(prog) >= 8 && steps < 8; steps++ {
			p := prog[:8]
			prog = prog[8:]
			m := ms[p[0]&1]
			var w uverbs.SendWQE
			want := !m.valid
			next := *m
			switch {
			case p[0]&2 != 0: // LOCAL_INV, of the current key or another
				key := m.key
				if p[6]&0x80 != 0 {
					key ^= 1
				}
				w = mlx5test.KernelLocalInvWQE(key)
				want = key == m.key
				next.valid = false
			case !m.klm:
				n := 1 + int(p[2]&7)
				pages := make([]uint64, n)
				for i := range pages {
					pages[i] = b.data + uint64((int(p[3])+3*i)%16)<<12
				}
				next.key = m.key&^0xff | uint32(p[1])
				next.iova, next.length = 0x7f0000000000+uint64(p[4]&3)<<10, 1+uint64(p[4]>>2)*512
				loaded := 8 // inline: 64 bytes, zero-padded
				var ptr *uverbs.DataSeg
				if p[2]&0x80 != 0 {
					loaded = 16 // 128 bytes through the DMA key
					clear(b.drv.Bytes(list, 128))
					copy(b.drv.Bytes(list, 8*n), mtts(pages...))
					ptr = &uverbs.DataSeg{Addr: list, ByteCount: 128, LKey: dmaKey}
				}
				for i := range loaded {
					next.entries[i] = 0
					if i < n {
						next.entries[i] = pages[i]
					}
				}
				need := (next.iova&0xfff + next.length + 4095) >> 12
				for i := range need {
					if next.entries[i] == 0 {
						want = false
					}
				}
				var l []byte
				if ptr == nil {
					l = mtts(pages...)
				}
				w = mlx5test.RegMRWQE(next.key, mlx5test.ModeMTT, uint32(p[5]&0xf), next.iova, next.length, 12, l, ptr)
				next.valid, next.write = true, p[5]&2 != 0
			default:
				n := 1 + int(p[2]&3)
				var es []klmEntry
				next.ranges = nil
				var total uint64
				for i := range n {
					e := klmEntry{n: 1 + uint32(p[3]>>(2*i)&3)*300, key: dmaKey, va: b.data + uint64((i*5000+int(p[4])*7)%60000)}
					es = append(es, e)
					next.ranges = append(next.ranges, frwrRange{e.va, uint64(e.n)})
					total += uint64(e.n)
				}
				next.key = m.key&^0xff | uint32(p[1])
				next.iova, next.length = 0x10000, total
				if p[4]&0x80 != 0 {
					next.length = total + 100 // the list falls short
					want = false
				}
				w = mlx5test.RegMRWQE(next.key, mlx5test.ModeKLM, uint32(p[5]&0xf), next.iova, next.length, 0, klms(es...), nil)
				next.valid, next.write = true, p[5]&2 != 0
			}
			idx, cqe := b.post(t, w)
			got := cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq
			if got != want {
				t.Fatalf("step %d: UMR % x on %+v completed ok=%v, the model says %v (%+v)", steps, p, *m, got, want, uverbs.DecodeErrCQE(cqe))
			}
			if got {
				checkReq(t, cqe, b.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
				*m = next
			} else {
				reconnect(t, a, b)
			}
			st := mkeyOf(b, m.key)
			if st.valid != m.valid || m.valid && (st.start != m.iova || st.length != m.length || st.key != m.key) {
				t.Fatalf("step %d: mkey %+v, the model's %+v", steps, st, *m)
			}
			// The peer's WRITE through the key.
			off := uint64(p[7]) * 37 % (m.length + 64)
			msg := make([]byte, 8)
			binary.BigEndian.PutUint64(msg, uint64(steps)<<56|off)
			copy(a.mem(32768, 8), msg)
			ok := m.valid && m.write && off+8 <= m.length
			cqe = rdma(t, a, false, m.key, m.iova+off, 8)
			if wrote := cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq; wrote != ok {
				t.Fatalf("step %d: WRITE of 8 bytes at +%#x of %+v: ok=%v, the model says %v", steps, off, *m, wrote, ok)
			}
			if !ok {
				reconnect(t, a, b)
				continue
			}
			for i := range uint64(8) {
				if g := b.drv.Bytes(m.gpaOf(off+i), 1); !bytes.Equal(g, msg[i:i+1]) {
					t.Fatalf("step %d: byte %d of the WRITE at +%#x: guest %#x holds %#x, want %#x", steps, i, off, m.gpaOf(off+i), g[0], msg[i])
				}
			}
		}
		for _, d := range []*Device{a.d, b.d} {
			d.core.Lock()
			fatal := d.seg.synd != 0
			d.core.Unlock()
			if fatal {
				t.Fatal("a device died")
			}
		}
	})
}
