package ifc

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// refGet and refSet are the PRM's bit numbering written out one bit at a
// time (bit 0 = the most significant bit of byte 0): the oracle for Field.
func refGet(b []byte, off, width uint32) uint64 {
	var v uint64
	for i := off; i < off+width; i++ {
		v = v<<1 | uint64(b[i/8]>>(7-i%8)&1)
	}
	return v
}

func refSet(b []byte, off, width uint32, v uint64) {
	for i := off + width; i > off; i-- {
		bit := i - 1
		if v&1 != 0 {
			b[bit/8] |= 1 << (7 - bit%8)
		} else {
			b[bit/8] &^= 1 << (7 - bit%8)
		}
		v >>= 1
	}
}

// TestFieldGolden: fields whose place and value are written from
// mlx5_ifc.h and device.h, read and written on known bytes.
func TestFieldGolden(t *testing.T) {
	in := []byte{0x01, 0x04, 0xab, 0xcd, 0x00, 0x00, 0x00, 0x07, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, c := range []struct {
		name string
		f    Field
		want uint32
	}{
		{"mbox_in.opcode", MboxInOpcode, 0x104},
		{"mbox_in.uid", MboxInUID, 0xabcd},
		{"mbox_in.op_mod", MboxInOpMod, 7},
		{"bit 0", F(0, 1), 0},
		{"bit 7", F(7, 1), 1},
		{"bits 13:15", F(13, 3), 4},
		{"dword 1", F(0x20, 0x20), 7},
	} {
		if got := c.f.Get(in); got != c.want {
			t.Errorf("%s: Get = %#x, want %#x", c.name, got, c.want)
		}
	}
	out := make([]byte, 16)
	MboxOutStatus.Set(out, uint32(StatBadOpErr))
	MboxOutSyndrome.Set(out, 0x12345678)
	if want := []byte{0x02, 0, 0, 0, 0x12, 0x34, 0x56, 0x78}; !bytes.Equal(out[:8], want) {
		t.Errorf("mbox_out status+syndrome = % x, want % x", out[:8], want)
	}
	// MLX5_SET masks the value to the field and keeps the word's other bits.
	w := []byte{0xff, 0xff, 0xff, 0xff}
	F(21, 3).Set(w, 0xfa) // 0xfa & 7 = 2: nic_interface-like bits 10:8
	if got := binary.BigEndian.Uint32(w); got != 0xfffffaff {
		t.Errorf("Set(21,3) = %#x, want 0xfffffaff", got)
	}
	b := make([]byte, 16)
	F(0x40, 64).Set64(b, 0x0102030405060708)
	if got := F(0x40, 64).Get64(b); got != 0x0102030405060708 || b[8] != 1 || b[15] != 8 {
		t.Errorf("Set64/Get64: % x", b)
	}
	if got := F(0x40, 0x40).Bytes(b); len(got) != 8 || got[0] != 1 {
		t.Errorf("Bytes = % x", got)
	}
}

// TestFieldValid: the fields MLX5_GET and friends cannot address.
func TestFieldValid(t *testing.T) {
	for _, c := range []struct {
		f  Field
		ok bool
	}{
		{Field{0, 1}, true}, {Field{31, 1}, true}, {Field{0, 32}, true}, {Field{16, 16}, true},
		{Field{0, 0}, false}, {Field{31, 2}, false}, {Field{16, 32}, false},
		{Field{64, 64}, true}, {Field{32, 64}, true /* a byte array, 8 bytes */},
		{Field{4, 40}, false}, {Field{0x80, 0x200}, true},
	} {
		if got := c.f.Valid(); got != c.ok {
			t.Errorf("%+v.Valid() = %v, want %v", c.f, got, c.ok)
		}
	}
	mustPanic(t, "F straddling", func() { F(30, 4) })
	mustPanic(t, "Get of a 64-bit field", func() { F(0, 64).Get(make([]byte, 8)) })
	mustPanic(t, "Get64 of a 32-bit field", func() { F(0, 32).Get64(make([]byte, 8)) })
	mustPanic(t, "Bytes of a bit field", func() { F(3, 2).Bytes(make([]byte, 8)) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	fn()
}

// TestFieldAgainstReference: every valid field of the first three words
// reads and writes as the bit-at-a-time oracle.
func TestFieldAgainstReference(t *testing.T) {
	pattern := []byte{0x5a, 0xc3, 0x0f, 0xf0, 0x81, 0x7e, 0x24, 0xdb, 0x99, 0x66, 0x12, 0x34}
	for off := uint32(0); off < 96; off++ {
		for width := uint32(1); width <= 32; width++ {
			f := Field{off, width}
			if !f.Valid() {
				continue
			}
			checkField(t, f, pattern, 0xdeadbeef)
		}
	}
}

func checkField(t *testing.T, f Field, b []byte, v uint32) {
	t.Helper()
	if got, want := f.Get(b), uint32(refGet(b, f.Off, f.Width)); got != want {
		t.Fatalf("%+v.Get = %#x, reference %#x", f, got, want)
	}
	got, want := bytes.Clone(b), bytes.Clone(b)
	f.Set(got, v)
	refSet(want, f.Off, f.Width, uint64(v))
	if !bytes.Equal(got, want) {
		t.Fatalf("%+v.Set(%#x) = % x, reference % x", f, v, got, want)
	}
	if r := f.Get(got); r != v&f.mask() {
		t.Fatalf("%+v: Set(%#x) then Get = %#x", f, v, r)
	}
}

// FuzzField: Get and Set of any addressable field agree with the
// reference bit numbering on any bytes.
func FuzzField(f *testing.F) {
	f.Add(uint32(0), uint32(16), uint32(0x104), []byte{1, 4, 0, 0})
	f.Add(uint32(21), uint32(3), uint32(7), []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, off, width, v uint32, b []byte) {
		fl := Field{off % 256, width%32 + 1}
		if !fl.Valid() || fl.End() > uint32(len(b)) || len(b) < int(fl.word())+4 {
			return
		}
		checkField(t, fl, b, v)
	})
}

// TestCmdLayoutOffsets: mlx5_cmd_layout and mlx5_cmd_prot_block as
// device.h declares them.
func TestCmdLayoutOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"type", CmdLayoutType, 0}, {"inlen", CmdLayoutInLen, 4}, {"in_ptr", CmdLayoutInPtr, 8},
		{"in", CmdLayoutIn, 16}, {"out", CmdLayoutOut, 32}, {"out_ptr", CmdLayoutOutPtr, 48},
		{"outlen", CmdLayoutOutLen, 56}, {"token", CmdLayoutToken, 60}, {"sig", CmdLayoutSig, 61},
		{"status_own", CmdLayoutStatusOwn, 63}, {"sizeof(mlx5_cmd_layout)", CmdLayoutSize, 64},
		{"block next", ProtBlockNext, 512 + 48}, {"block_num", ProtBlockBlockNum, 568},
		{"block token", ProtBlockToken, 573}, {"ctrl_sig", ProtBlockCtrlSig, 574},
		{"block sig", ProtBlockSig, 575}, {"sizeof(mlx5_cmd_prot_block)", CmdProtBlockSize, 576},
		{"pool alignment", CmdProtBlockAlign, 1024},
		{"LONG_LIST_SIZE", MaxCmdMsgSize, 4194832}, {"its blocks", MaxCmdBlocks, 8193},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct{ n, blocks uint32 }{{0, 0}, {16, 0}, {17, 1}, {528, 1}, {529, 2}, {0x1010, 8}} {
		if got := MsgBlocks(c.n); got != c.blocks {
			t.Errorf("MsgBlocks(%d) = %d, want %d", c.n, got, c.blocks)
		}
	}
}

// TestInitSegOffsets: struct mlx5_init_seg and struct health_buffer.
func TestInitSegOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"cmdq_addr_h", InitSegCmdqAddrH, 4 * 4}, {"cmd_dbell", InitSegCmdDbell, 6 * 4},
		{"initializing", InitSegInitializing, (7 + 120) * 4}, {"health", InitSegHealth, 128 * 4},
		{"health.fw_ver", HealthFWVer, 0x200 + (6+2+1+1+1+1)*4}, {"health.synd", HealthSynd, 0x200 + 0x3d},
		{"cmd_exec_to", InitSegCmdExecTo, 0x240 + 878*4}, {"internal_timer_h", InitSegInternalTimerH, 0x240 + 880*4},
		{"health_counter", InitSegHealthCounter, 0x1000 + 4*4}, {"real_time_h", InitSegRealTimeH, 0x1014 + 11*4},
		{"ieee1588_clk", InitSegIEEE1588Clk, 0x1048 + 1006*4}, {"sizeof", InitSegSize, 0x2010},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if got := FWRev(16, 35); got != 0x00230010 {
		t.Errorf("FWRev(16, 35) = %#x", got)
	}
	if got := CmdIfRevFWSub(CmdIfRev, 1010); got>>16 != 5 || got&0xffff != 1010 {
		t.Errorf("CmdIfRevFWSub = %#x", got)
	}
	if got := uint32(5<<LogCmdqSizeShift|6) & (LogCmdqSizeMask | LogCmdqStrideMask); got != 0x56 {
		t.Errorf("log sizes = %#x", got)
	}
}

// TestCmdLayoutRoundTrip: Encode then Decode gives the descriptor back, and
// each field lands at its offset.
func TestCmdLayoutRoundTrip(t *testing.T) {
	l := CmdLayout{Type: PCICmdXport, InLen: 0x1010, InPtr: 0x1122334455667700, OutPtr: 0x8877665544332200,
		OutLen: 0x20, Token: 0xa5, Sig: 0x3c, StatusOwn: CmdOwnerHW}
	for i := range l.In {
		l.In[i], l.Out[i] = byte(i), byte(0xf0+i)
	}
	b := bytes.Repeat([]byte{0xee}, CmdLayoutSize)
	l.Encode(b)
	if b[1] != 0 || b[0x3e] != 0 {
		t.Errorf("reserved bytes not zeroed: % x", b)
	}
	if b[0] != 7 || b[0x3c] != 0xa5 || b[0x3f] != 1 || binary.BigEndian.Uint32(b[4:]) != 0x1010 || b[0x10] != 0 || b[0x20] != 0xf0 {
		t.Errorf("encoded % x", b)
	}
	got, err := DecodeCmdLayout(b)
	if err != nil || got != l {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, l)
	}
	if _, err := DecodeCmdLayout(b[:63]); err == nil {
		t.Error("DecodeCmdLayout of 63 bytes: no error")
	}
	l.StatusOwn = byte(DeliveryTokErr) << 1
	if l.DeliveryStatus() != DeliveryTokErr {
		t.Errorf("DeliveryStatus = %v", l.DeliveryStatus())
	}
	p := CmdProtBlock{Next: 0xabc400, BlockNum: 3, Token: 9, CtrlSig: 1, Sig: 2}
	blk := make([]byte, CmdProtBlockSize)
	p.Encode(blk)
	if gp, err := DecodeProtBlock(blk); err != nil || gp != p {
		t.Errorf("block round trip: %+v, %v", gp, err)
	}
	if _, err := DecodeProtBlock(blk[:575]); err == nil {
		t.Error("DecodeProtBlock of 575 bytes: no error")
	}
}

// TestStatusTables: the statuses and opcodes the driver names, with the
// driver's values and strings.
func TestStatusTables(t *testing.T) {
	for _, c := range []struct {
		got  string
		want string
	}{
		{StatBadOpErr.String(), "bad operation"}, {Status(0x51).String(), "bad output length"},
		{Status(0xee).String(), "unknown status 0xee"},
		{DeliveryStatus(0x10).String(), "bad command descriptor type"},
		{DeliveryTokErr.String(), "token error"}, {DeliveryStatus(0x11).String(), "unknown status code 0x11"},
		{OpEnableHCA.String(), "ENABLE_HCA"}, {Opcode(0x507).String(), "2ERR_QP"},
		{Opcode(0x50d).String(), "MAD_IFC"}, {Opcode(0xffff).String(), "unknown command opcode 0xffff"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	// Appendix A: every opcode of stages 1–6, at the header's value.
	for op, want := range map[Opcode]uint16{
		OpQueryHCACap: 0x100, OpQueryAdapter: 0x101, OpInitHCA: 0x102, OpTeardownHCA: 0x103,
		OpEnableHCA: 0x104, OpDisableHCA: 0x105, OpQueryPages: 0x107, OpManagePages: 0x108,
		OpSetHCACap: 0x109, OpQueryISSI: 0x10a, OpSetISSI: 0x10b, OpSetDriverVersion: 0x10d,
		OpCreateMkey: 0x200, OpDestroyMkey: 0x202, OpCreateEQ: 0x301, OpDestroyEQ: 0x302,
		OpCreateCQ: 0x400, OpDestroyCQ: 0x401, OpModifyCQ: 0x403, OpCreateQP: 0x500,
		OpDestroyQP: 0x501, OpRst2InitQP: 0x502, OpInit2RTRQP: 0x503, OpRTR2RTSQP: 0x504,
		OpRTS2RTSQP: 0x505, OpSQErr2RTSQP: 0x506, Op2ErrQP: 0x507, Op2RstQP: 0x50a,
		OpQueryQP: 0x50b, OpSQDRTSQP: 0x50c, OpMADIfc: 0x50d, OpInit2InitQP: 0x50e,
		OpCreateXRCSRQ: 0x705, OpDestroyXRCSRQ: 0x706, OpQueryXRCSRQ: 0x707, OpArmXRCSRQ: 0x708,
		OpQueryHCAVportContext: 0x762, OpAllocPD: 0x800, OpDeallocPD: 0x801, OpAllocUAR: 0x802,
		OpDeallocUAR: 0x803, OpAccessReg: 0x805, OpAttachToMCG: 0x806, OpDetachFromMCG: 0x807,
		OpAllocXRCD: 0x80e, OpDeallocXRCD: 0x80f, OpCreateRMP: 0x90c, OpModifyRMP: 0x90d,
		OpDestroyRMP: 0x90e, OpQueryRMP: 0x90f,
	} {
		if uint16(op) != want || !op.Known() {
			t.Errorf("%v = %#x (known %v), want %#x", op, uint16(op), op.Known(), want)
		}
	}
}
