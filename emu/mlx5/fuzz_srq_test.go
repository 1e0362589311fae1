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

// FuzzSRQRecv: a guest that writes anything into its RMP (the 4 WQEs of
// 64 bytes, their next segments and scatter lists) and its doorbell
// record (the posted count) while a peer sends to an RC QP receiving
// through it. Oracle: the device stays alive; the SEND's bytes land
// nowhere in the receiver's memory but inside the region its mkey covers;
// a successful receive CQE names a WQE index of the RMP and the bytes
// sent; a second peer's SEND still completes or is refused, never
// misplaced.
func FuzzSRQRecv(f *testing.F) {
	good := func(count uint32, addrs ...uint64) []byte {
		b := make([]byte, 4+4*64)
		binary.BigEndian.PutUint32(b, count)
		for i := range 4 {
			w := uverbs.RecvWQE{Next: uverbs.SRQNextSeg{NextWQEIndex: uint16(i+1) & 3}}
			if i < len(addrs) {
				w.Data = []uverbs.DataSeg{{ByteCount: 1024, LKey: 0, Addr: addrs[i]}} // key patched in
			}
			w.Encode(b[4+64*i:4+64*(i+1)], true)
		}
		return b
	}
	f.Add(good(1, 8192))
	f.Add(good(3, 8192, 12288, 16384))
	f.Add(good(0x10000, 8192))
	f.Add(make([]byte, 4+256))
	f.Add(bytes.Repeat([]byte{0xff}, 4+256))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 4 {
			return
		}
		sub := subnet.New(subnet.Config{})
		a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
		b0 := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
		s, _ := newRMP(t, b0)
		b := addEndWith(t, b0.d, b0.drv, b0.ib, func(q *mlx5test.QPArgs) { q.RQType, q.SRQ = ifc.RQTypeSRQ, s.N })
		a.connect(t, b0.lid, b.wq.Q.QPN)
		b.connect(t, a.lid, a.wq.Q.QPN)
		// The guest's RMP: the input over its WQEs (a data segment's
		// lkey 0 is the mkey of the RMP's PD, its address an offset in
		// that region).
		wqes := make([]byte, 256)
		copy(wqes, in[4:])
		for i := 0; i+64 <= len(wqes); i += 64 {
			for seg := i + 16; seg+16 <= i+64; seg += 16 {
				if binary.BigEndian.Uint32(wqes[seg+4:]) == 0 {
					binary.BigEndian.PutUint32(wqes[seg+4:], b0.key) // the RMP's PD's
					if off := binary.BigEndian.Uint64(wqes[seg+8:]); off < 64<<10 {
						binary.BigEndian.PutUint64(wqes[seg+8:], b0.data+off)
					}
				}
			}
		}
		b.wq.Hold(func() {
			for i := range 256 / 64 {
				copy(b.drv.Bytes(s.Pages[0]+uint64(i)*64, 64), wqes[i*64:(i+1)*64])
			}
			copy(b.drv.Bytes(s.DBR, 4), in[:4])
		})
		msg := bytes.Repeat([]byte("srq-fuzz-pattern"), 6)[:90]
		copy(a.mem(0, len(msg)), msg)
		for range 2 {
			a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
				Data: []uverbs.DataSeg{a.seg(0, uint32(len(msg)))}})
			a.d.Sync()
			b.d.Sync()
		}
		if _, err := b.drv.QueryQP(b.wq.Q); err != nil {
			t.Fatalf("the receiver's commands: %v", err)
		}
		// Where the pattern is in the receiver's memory.
		ram := b.drv.Bytes(ramBase, verbsRAM)
		lo, hi := b0.data-ramBase, b0.data-ramBase+64<<10
		for at := 0; ; {
			i := bytes.Index(ram[at:], msg[:16])
			if i < 0 {
				break
			}
			at += i
			if uint64(at) < lo || uint64(at) >= hi {
				t.Fatalf("SEND data at %#x, outside the region [%#x, %#x)", at+ramBase, lo+ramBase, hi+ramBase)
			}
			at++
		}
		for {
			c, ok := b.pollOnce()
			if !ok {
				break
			}
			if c[uverbs.OpOwnOffset]>>4 == uverbs.CQERespSend {
				if e := uverbs.DecodeCQE(c); e.WQECounter >= 4 || e.ByteCnt != uint32(len(msg)) {
					t.Fatalf("receive CQE %+v", e)
				}
			}
		}
	})
}
