package mlx5

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func hx(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestRecords: the doorbell records as the provider writes them
// (mlx5_post_recv: db[MLX5_RCV_DBR]; post_send_db: db[MLX5_SND_DBR];
// update_cons_index: dbrec[MLX5_CQ_SET_CI]; mlx5_arm_cq: dbrec[MLX5_CQ_ARM_DB]
// = sn<<28 | cmd | ci).
func TestRecords(t *testing.T) {
	b := make([]byte, 8)
	QPRecord{Recv: 0x1234, Send: 0xfffe}.Encode(b)
	if !bytes.Equal(b, hx("000012340000fffe")) {
		t.Fatalf("QP record % x", b)
	}
	// The kernel writes the whole send counter: only its low 16 bits count.
	if r := DecodeQPRecord(hx("0001ffff00030002")); r.Recv != 0xffff || r.Send != 2 {
		t.Fatalf("QP record %+v", r)
	}
	if SRQCounter(hx("00010005")) != 5 || Pending(2, 0xfffe) != 4 {
		t.Fatal("SRQ counter / pending")
	}
	c := CQRecord{CI: 0xabcdef, Arm: Arm{SN: 2, Cmd: CQDBReqNotSol, CI: 0x000010}}
	c.Encode(b)
	if !bytes.Equal(b, hx("00abcdef21000010")) {
		t.Fatalf("CQ record % x", b)
	}
	if got := DecodeCQRecord(b); got != c || !got.Arm.Solicited() {
		t.Fatalf("CQ record %+v", got)
	}
	if got := DecodeCQRecord(hx("ffabcdefff000010")); got.CI != 0xabcdef || got.Arm.SN != 3 || got.Arm.Cmd != 0x0f000000 {
		t.Fatalf("CQ record reserved bits: %+v", got)
	}
}

// TestRegisters: the send doorbell is the control segment's first 8 bytes
// (post_send_db's mmio_write64_be of *(__be64 *)ctrl), the arm doorbell
// (sn<<28 | cmd | ci) << 32 | cqn written big-endian.
func TestRegisters(t *testing.T) {
	s := Send{WQEIndex: 0x0102, Opcode: 0x0a, QPN: 0xabc, DS: 5}
	v := s.Bytes()
	if !bytes.Equal(v[:], hx("0001020a000abc05")) || DecodeSend(v) != s || s.Next() != 0x0104 {
		t.Fatalf("send doorbell % x, next %#x", v, s.Next())
	}
	if (Send{WQEIndex: 0xffff, DS: 63}).Next() != 15 {
		t.Fatal("next wraps at 16 bits")
	}
	a := CQArm{Arm: Arm{SN: 1, Cmd: CQDBReqNot, CI: 0x123456}, CQN: 0x77}
	v = a.Bytes()
	if !bytes.Equal(v[:], hx("1012345600000077")) || DecodeCQArm(v) != a {
		t.Fatalf("arm doorbell % x", v)
	}
	for off, want := range map[uint64]Kind{0x20: KindCQArm, 0x800: KindSend, 0xa00: KindSend, 0xb00: KindSend, 0xff8: KindSend} {
		if k, ok := Register(off); !ok || k != want {
			t.Errorf("Register(%#x) = %v %v", off, k, ok)
		}
	}
	for _, off := range []uint64{0, 0x24, 0x40, 0x48, 0x7f8, 0x804, 0x1000} {
		if _, ok := Register(off); ok {
			t.Errorf("Register(%#x) is a doorbell", off)
		}
	}
}

// TestLatch: one 8-byte write; two halves in either order; a lone half; a
// second high half; a half dropped by an 8-byte write; writes that are no
// doorbell; registers latch independently.
func TestLatch(t *testing.T) {
	var l Latch
	full := hx("0001020a000abc05")
	if d, ok := l.Write(0x800, full); !ok || d.Kind != KindSend || d.Offset != 0x800 || !bytes.Equal(d.Value[:], full) {
		t.Fatalf("8-byte write: %+v %v", d, ok)
	}
	// Low then high (the order QEMU splits an 8-byte store in).
	if _, ok := l.Write(0x20, hx("10123456")); ok || !l.Pending(0x20) {
		t.Fatal("low half alone made a doorbell")
	}
	d, ok := l.Write(0x24, hx("00000077"))
	if !ok || d.Kind != KindCQArm || d.CQArm() != (CQArm{Arm: Arm{SN: 1, CI: 0x123456}, CQN: 0x77}) || l.Pending(0x20) {
		t.Fatalf("low, high: %+v %v", d, ok)
	}
	// High then low.
	l.Write(0xa04, full[4:])
	if d, ok = l.Write(0xa00, full[:4]); !ok || !bytes.Equal(d.Value[:], full) || d.Send().QPN != 0xabc {
		t.Fatalf("high, low: %+v %v", d, ok)
	}
	// A second high half replaces the first: the doorbell has the latest.
	l.Write(0x904, hx("00000101"))
	if _, ok = l.Write(0x904, hx("00000202")); ok {
		t.Fatal("two high halves made a doorbell")
	}
	if d, ok = l.Write(0x900, hx("00000008")); !ok || !bytes.Equal(d.Value[:], hx("0000000800000202")) || l.Stats.Replaced != 1 {
		t.Fatalf("second high half: %+v %v %+v", d, ok, l.Stats)
	}
	// A lone half dropped by an 8-byte write, and by Reset.
	l.Write(0x800, hx("11111111"))
	if d, ok = l.Write(0x800, full); !ok || !bytes.Equal(d.Value[:], full) || l.Stats.Discarded != 1 {
		t.Fatalf("8-byte after a half: %+v %+v", d, l.Stats)
	}
	if _, ok = l.Write(0x804, hx("22222222")); ok {
		t.Fatal("the dropped half came back")
	}
	l.Reset()
	if _, ok = l.Write(0x800, hx("33333333")); ok || l.Pending(0x808) {
		t.Fatal("reset kept a half")
	}
	// Registers are independent: a half at 0x808 does not pair with 0x800's.
	if _, ok = l.Write(0x80c, hx("44444444")); ok {
		t.Fatal("halves of two registers paired")
	}
	// No doorbell, nothing changed.
	for _, w := range []struct {
		off  uint64
		data []byte
	}{
		{0x802, hx("55555555")}, {0x804, full}, {0x800, hx("0102")}, {0x800, make([]byte, 64)},
		{0x40, hx("00000001")}, {0x48, hx("00000001")}, {0x1000, full}, {0x1004, hx("00000001")}, {1<<64 - 4, hx("00000001")},
	} {
		if _, ok := l.Write(w.off, w.data); ok {
			t.Errorf("write of %d bytes at %#x made a doorbell", len(w.data), w.off)
		}
	}
	if l.Stats.Ignored != 9 || !l.Pending(0x800) || !l.Pending(0x808) {
		t.Fatalf("ignored writes changed the latch: %+v", l.Stats)
	}
}

// FuzzLatch: random writes to a few registers. Oracle: an 8-byte write is
// its own doorbell; every other doorbell is made of a word written at +0
// and a word written at +4 of that register since its last doorbell, one
// of them the write that completed it; a +0 write followed directly by a
// +4 write of the same register always makes one.
func FuzzLatch(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 1, 0, 5, 6, 7, 8})
	f.Add([]byte{1, 1, 9, 9, 9, 9, 2, 1, 8, 8, 8, 8, 8, 8, 8, 8})
	regs := []uint64{0x20, 0x800, 0x900, 0xff8}
	f.Fuzz(func(t *testing.T, ops []byte) {
		var l Latch
		written := map[uint64]map[[2]uint64]bool{} // register → {offset in register, word} since its last doorbell
		type w struct {
			reg, off uint64
		}
		var prev *w
		for len(ops) >= 2 {
			op, sel := ops[0], ops[1]
			ops = ops[2:]
			reg := regs[int(sel)%len(regs)]
			if written[reg] == nil {
				written[reg] = map[[2]uint64]bool{}
			}
			var off uint64
			var data []byte
			switch op % 4 {
			case 0, 1: // a half
				if len(ops) < 4 {
					return
				}
				off, data, ops = reg+4*uint64(op%2), ops[:4], ops[4:]
			case 2: // 8 bytes
				if len(ops) < 8 {
					return
				}
				off, data, ops = reg, ops[:8], ops[8:]
			case 3: // misaligned, ignored
				off, data = reg+2, []byte{1, 2, 3, 4}
			}
			d, ok := l.Write(off, data)
			if op%4 == 3 {
				if ok {
					t.Fatal("misaligned write made a doorbell")
				}
				continue
			}
			cur := &w{reg, off}
			if len(data) == 8 {
				if !ok || !bytes.Equal(d.Value[:], data) {
					t.Fatalf("8-byte write: %v %v", d, ok)
				}
				clear(written[reg])
				prev = nil
				continue
			}
			word := uint64(data[0])<<24 | uint64(data[1])<<16 | uint64(data[2])<<8 | uint64(data[3])
			written[reg][[2]uint64{off - reg, word}] = true
			if prev != nil && prev.reg == reg && prev.off == reg && off == reg+4 && !ok {
				t.Fatal("+0 then +4 made no doorbell")
			}
			prev = cur
			if !ok {
				continue
			}
			lo := uint64(be.Uint32(d.Value[0:]))
			hi := uint64(be.Uint32(d.Value[4:]))
			if d.Offset != uint16(reg) || !written[reg][[2]uint64{0, lo}] || !written[reg][[2]uint64{4, hi}] {
				t.Fatalf("doorbell % x at %#x not made of halves written there", d.Value, d.Offset)
			}
			if (off == reg && lo != word) || (off == reg+4 && hi != word) {
				t.Fatal("the completing write is not part of the doorbell")
			}
			clear(written[reg])
			prev = nil
		}
	})
}
