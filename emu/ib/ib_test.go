package ib

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
)

// Addresses of the test packets.
var (
	gidA = MakeGID(0xfe80000000000000, 0x0002c90300000a0a)
	gidB = MakeGID(0xfe80000000000000, 0x0002c90300000b0b)
)

// TestLRHLayout checks the LRH bit positions against IBA 7.7 (VL 4 | LVer
// 4 | SL 4 | rsv 2 | LNH 2 | DLID 16 | rsv 5 | PktLen 11 | SLID 16).
func TestLRHLayout(t *testing.T) {
	b := make(LRH, LRHSize)
	b.Encode(&LRHFields{VL: 0xA, LVer: 0, SL: 0x5, LNH: LNHIBAGlobal, DLID: 0x1234, PktLen: 0x7FF, SLID: 0xBEEF})
	if want := "a053123407ffbeef"; hex.EncodeToString(b) != want {
		t.Fatalf("LRH = %x, want %s", []byte(b), want)
	}
	f := b.Fields()
	if f.VL != 0xA || f.SL != 5 || f.LNH != LNHIBAGlobal || f.DLID != 0x1234 || f.PktLen != 0x7FF || f.SLID != 0xBEEF {
		t.Fatalf("fields %+v", f)
	}
	b.Encode(&LRHFields{LVer: 0xF, PktLen: 0xFFFF})
	if b.LVer() != 0xF || b.PktLen() != 0x7FF {
		t.Fatalf("truncation: %x", []byte(b))
	}
}

// TestGRHLayout checks the GRH against IBA 8.3 (the IPv6 layout).
func TestGRHLayout(t *testing.T) {
	g := make(GRH, GRHSize)
	g.Encode(&GRHFields{TClass: 0xAB, FlowLabel: 0xCDEF1, PayLen: 0x0123, NxtHdr: NxtHdrIBA, HopLmt: 64,
		SGID: gidA, DGID: gidB})
	want := "6abcdef10123" + "1b40" + hex.EncodeToString(gidA[:]) + hex.EncodeToString(gidB[:])
	if hex.EncodeToString(g) != want {
		t.Fatalf("GRH = %x, want %s", []byte(g), want)
	}
	f := g.Fields()
	if g.IPVer() != 6 || f.TClass != 0xAB || f.FlowLabel != 0xCDEF1 || f.PayLen != 0x123 || f.HopLmt != 64 ||
		f.SGID != gidA || f.DGID != gidB {
		t.Fatalf("fields %+v", f)
	}
	if gidA.Prefix() != 0xfe80000000000000 || gidA.GUID() != 0x0002c90300000a0a || gidA.IsMulticast() {
		t.Fatal("GID accessors")
	}
}

func TestLIDClasses(t *testing.T) {
	for _, c := range []struct {
		lid          uint16
		unicast, mcg bool
	}{{0, false, false}, {1, true, false}, {0xBFFF, true, false}, {0xC000, false, true}, {0xFFFE, false, true}, {0xFFFF, false, false}} {
		if IsUnicastLID(c.lid) != c.unicast || IsMulticastLID(c.lid) != c.mcg {
			t.Errorf("LID %#x", c.lid)
		}
	}
}

// refICRC is an independent ICRC: hash/crc32 over a copy with the fields
// of IBA 7.8.1 set to ones, written byte by byte from the spec's list.
func refICRC(pkt []byte) uint32 {
	c := bytes.Clone(pkt[:len(pkt)-6])
	bth := 8
	if c[1]&3 == 3 {
		for i := 0; i < 8; i++ {
			c[i] = 0xff // the whole LRH
		}
		c[8] |= 0x0f                          // GRH traffic class (high nibble)
		c[9], c[10], c[11] = 0xff, 0xff, 0xff // traffic class, flow label
		c[15] = 0xff                          // hop limit
		bth += 40
	} else {
		c[0] |= 0xf0 // VL
	}
	c[bth+4] = 0xff // BTH Resv8a
	return crc32.ChecksumIEEE(c)
}

// refVCRC is an independent VCRC: bit by bit, polynomial 0x100B applied
// LSB first (reflected), seed 0xFFFF, complemented.
func refVCRC(pkt []byte) uint16 {
	reg := uint16(0xFFFF)
	for _, c := range pkt[:len(pkt)-2] {
		for i := 0; i < 8; i++ {
			bit := (uint16(c>>i) ^ reg) & 1
			reg >>= 1
			if bit != 0 {
				reg ^= 0xD008 // bit-reversed 0x100B
			}
		}
	}
	return ^reg
}

// TestCRCsAnyLength: VCRC (eight bytes at a time) and ICRC (the payload
// through hash/crc32) agree with the bit-by-bit and copy-and-mask
// references on random packets of every length from the shortest to past
// a few slicing strides, local and global.
func TestCRCsAnyLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := LRHSize + roce.BTHSize + roce.ICRCSize + VCRCSize; n < 200; n++ {
		for _, global := range []bool{false, true} {
			if global && n < LRHSize+GRHSize+roce.BTHSize+roce.ICRCSize+VCRCSize {
				continue
			}
			pkt := make([]byte, n)
			for i := range pkt {
				pkt[i] = byte(rng.Uint32())
			}
			pkt[1] = pkt[1]&^3 | byte(LNHIBALocal)
			if global {
				pkt[1] = pkt[1]&^3 | byte(LNHIBAGlobal)
			}
			if v, _ := VCRC(pkt); v != refVCRC(pkt) {
				t.Fatalf("%d bytes: VCRC %#x, reference %#x", n, v, refVCRC(pkt))
			}
			if c, _ := ICRC(pkt); c != refICRC(pkt) {
				t.Fatalf("%d bytes, global %v: ICRC %#x, reference %#x", n, global, c, refICRC(pkt))
			}
		}
	}
}

// samplePackets are packets of every shape: local and global, with and
// without payload and pad, several opcodes.
func samplePackets() []PacketFields {
	payload := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i)
		}
		return p
	}
	mad := make([]byte, 256)
	mad[0], mad[1], mad[2], mad[3] = 1, 3, 2, 1
	return []PacketFields{
		{LRH: LRHFields{SL: 0, DLID: 3, SLID: 2}, Transport: roce.PacketFields{
			BTH:     roce.BTHFields{Opcode: roce.RCSendOnly, PKey: 0xFFFF, DestQP: 0x12, AckReq: true, PSN: 0x123456},
			Payload: payload(64)}},
		{LRH: LRHFields{VL: 1, SL: 2, DLID: 2, SLID: 3}, Transport: roce.PacketFields{
			BTH:  roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: 0xFFFF, DestQP: 0x11, PSN: 0x123456},
			AETH: roce.AETHFields{Syndrome: 0x1F, MSN: 1}}},
		{LRH: LRHFields{DLID: 1, SLID: 2}, GRH: &GRHFields{HopLmt: 0, SGID: gidA, DGID: gidB},
			Transport: roce.PacketFields{
				BTH:  roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xFFFF, DestQP: 1, PSN: 7},
				DETH: roce.DETHFields{QKey: 0x80010000, SrcQP: 1}, Payload: mad}},
		{LRH: LRHFields{VL: 3, SL: 9, DLID: 0xC000, SLID: 4}, GRH: &GRHFields{TClass: 0x20, FlowLabel: 0x12345,
			HopLmt: 255, SGID: gidA, DGID: MakeGID(0xff12401bffff0000, 0xffffffff)},
			Transport: roce.PacketFields{
				BTH:  roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0x8001, DestQP: 0xFFFFFF, PSN: 0xFFFFFF, SE: true},
				DETH: roce.DETHFields{QKey: 0x0B1B, SrcQP: 0x48}, Payload: payload(19)}},
		{LRH: LRHFields{DLID: 5, SLID: 6}, Transport: roce.PacketFields{
			BTH:  roce.BTHFields{Opcode: roce.RCRDMAWriteFirst, PKey: 0xFFFF, DestQP: 0x12, PSN: 1},
			RETH: roce.RETHFields{VA: 0x00007f1234560000, RKey: 0xabcdef, DMALength: 600}, Payload: payload(256)}},
	}
}

// TestBuildParse: every sample builds into a packet whose LRH, GRH, CRCs
// and transport are right, and parses back into its fields.
func TestBuildParse(t *testing.T) {
	for i, f := range samplePackets() {
		pkt, err := Build(make([]byte, 8192), &f)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		n, _ := PacketLen(f.Transport.BTH.Opcode, len(f.Transport.Payload), f.GRH != nil)
		if len(pkt) != n {
			t.Errorf("sample %d: %d bytes, PacketLen says %d", i, len(pkt), n)
		}
		l := LRH(pkt)
		if int(l.PktLen())*4 != len(pkt)-2 || l.DLID() != f.LRH.DLID || l.SLID() != f.LRH.SLID {
			t.Errorf("sample %d: LRH %x", i, pkt[:8])
		}
		if got := binary.LittleEndian.Uint32(pkt[len(pkt)-6:]); got != refICRC(pkt) {
			t.Errorf("sample %d: ICRC %#x, reference %#x", i, got, refICRC(pkt))
		}
		if got := binary.LittleEndian.Uint16(pkt[len(pkt)-2:]); got != refVCRC(pkt) {
			t.Errorf("sample %d: VCRC %#x, reference %#x", i, got, refVCRC(pkt))
		}
		p, err := Parse(pkt)
		if err != nil {
			t.Fatalf("sample %d: Parse: %v", i, err)
		}
		if (p.GRH != nil) != (f.GRH != nil) {
			t.Fatalf("sample %d: GRH presence", i)
		}
		if p.GRH != nil && int(p.GRH.PayLen()) != len(pkt)-8-40-2 {
			t.Errorf("sample %d: PayLen %d", i, p.GRH.PayLen())
		}
		g := p.Fields()
		again, err := Build(make([]byte, 8192), &g)
		if err != nil || !bytes.Equal(again, pkt) {
			t.Errorf("sample %d: rebuilt from parsed fields differs (%v)", i, err)
		}
		if !bytes.Equal(p.Transport.Payload, f.Transport.Payload) {
			t.Errorf("sample %d: payload", i)
		}
	}
}

// TestICRCMasks: changing a variant field keeps the ICRC, changing an
// invariant one changes it.
func TestICRCMasks(t *testing.T) {
	s := samplePackets()
	local, _ := Build(make([]byte, 512), &s[0])
	global, _ := Build(make([]byte, 512), &s[2])
	base := func(p []byte) uint32 { c, _ := ICRC(p); return c }
	for _, c := range []struct {
		name    string
		pkt     []byte
		off     int
		mask    byte
		variant bool
	}{
		{"local VL", local, 0, 0xF0, true},
		{"local SL", local, 1, 0xF0, false},
		{"local DLID", local, 3, 0xFF, false},
		{"local SLID", local, 7, 0xFF, false},
		{"local BTH FECN/BECN", local, 8 + 4, 0xC0, true},
		{"local BTH P_Key", local, 8 + 2, 0xFF, false},
		{"global SL", global, 1, 0xF0, true},
		{"global DLID", global, 3, 0xFF, true},
		{"global traffic class", global, 8, 0x0F, true},
		{"global flow label", global, 10, 0xFF, true},
		{"global hop limit", global, 15, 0xFF, true},
		{"global PayLen", global, 13, 0xFF, false},
		{"global SGID", global, 8 + 8 + 15, 0xFF, false},
		{"global DETH Q_Key", global, 48 + 12, 0xFF, false},
		{"global payload", global, 48 + 20 + 100, 0xFF, false},
	} {
		p := bytes.Clone(c.pkt)
		p[c.off] ^= c.mask
		if same := base(p) == base(c.pkt); same != c.variant {
			t.Errorf("%s: ICRC unchanged = %v, want %v", c.name, same, c.variant)
		}
	}
}

// TestParseErrors: each malformation is refused with its error.
func TestParseErrors(t *testing.T) {
	s := samplePackets()
	good, _ := Build(make([]byte, 512), &s[2])
	local, _ := Build(make([]byte, 512), &s[0])
	fix := func(p []byte) []byte { _ = PutICRC(p); _ = PutVCRC(p); return p }
	for _, c := range []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrTooShort},
		{"LRH only", good[:8], ErrTooShort},
		{"LVer", fix(func() []byte { p := bytes.Clone(good); p[0] |= 1; return p }()), ErrBadLVer},
		{"raw LNH", fix(func() []byte { p := bytes.Clone(good); p[1] &^= 3; return p }()), ErrBadLNH},
		{"raw IPv6 LNH", fix(func() []byte { p := bytes.Clone(good); p[1] = p[1]&^3 | 1; return p }()), ErrBadLNH},
		{"PktLen short", fix(func() []byte { p := bytes.Clone(good); p[5]--; return p }()), ErrBadPktLen},
		{"PktLen long", fix(func() []byte { p := bytes.Clone(good); p[5]++; return p }()), ErrBadPktLen},
		{"truncated", good[:len(good)-4], ErrBadPktLen},
		{"odd length", good[:len(good)-1], ErrBadPktLen},
		{"IPVer", fix(func() []byte { p := bytes.Clone(good); p[8] = 0x40; return p }()), ErrBadIPVer},
		{"NxtHdr", fix(func() []byte { p := bytes.Clone(good); p[14] = 17; return p }()), ErrBadNxtHdr},
		{"PayLen", fix(func() []byte { p := bytes.Clone(good); p[13]++; return p }()), ErrBadPayLen},
		{"VCRC", func() []byte { p := bytes.Clone(good); p[len(p)-1] ^= 1; return p }(), ErrBadVCRC},
		{"ICRC", func() []byte { p := bytes.Clone(good); p[len(p)-3] ^= 1; _ = PutVCRC(p); return p }(), ErrBadICRC},
		{"payload bit", func() []byte { p := bytes.Clone(good); p[100] ^= 1; _ = PutVCRC(p); return p }(), ErrBadICRC},
		{"local as global", fix(func() []byte { p := bytes.Clone(local); p[1] |= 3; return p }()), ErrBadIPVer},
		{"TVer", fix(func() []byte { p := bytes.Clone(local); p[9] |= 1; return p }()), roce.ErrBadTVer},
		{"opcode", fix(func() []byte { p := bytes.Clone(local); p[8] = 0x1F; return p }()), roce.ErrUnknownOpcode},
	} {
		if _, err := Parse(c.pkt); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

// TestBuildErrors: Build refuses what Parse would.
func TestBuildErrors(t *testing.T) {
	s := samplePackets()
	for _, c := range []struct {
		name string
		mod  func(*PacketFields)
		buf  int
		want error
	}{
		{"LVer", func(f *PacketFields) { f.LRH.LVer = 1 }, 512, ErrBadLVer},
		{"VL", func(f *PacketFields) { f.LRH.VL = 16 }, 512, ErrFieldRange},
		{"SL", func(f *PacketFields) { f.LRH.SL = 16 }, 512, ErrFieldRange},
		{"flow label", func(f *PacketFields) { f.GRH = &GRHFields{FlowLabel: 1 << 20} }, 512, ErrFieldRange},
		{"short buffer", func(*PacketFields) {}, 20, ErrShortBuffer},
		{"short for payload", func(*PacketFields) {}, 60, roce.ErrShortBuffer},
		{"QPN", func(f *PacketFields) { f.Transport.BTH.DestQP = 1 << 24 }, 512, roce.ErrFieldRange},
	} {
		f := s[0]
		c.mod(&f)
		if _, err := Build(make([]byte, c.buf), &f); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

// goldenVectors are whole packets (LRH through VCRC) of samplePackets 0
// and 1, frozen: any change to the encoding shows here. Their ICRC and
// VCRC agree with the independent refICRC/refVCRC, and tshark decodes them
// (TestTshark).
var goldenVectors = []string{
	// RC SEND_ONLY, local, DLID 3 ← SLID 2, 64 bytes.
	"0002000300160002" + "0400ffff00000012" + "80123456" +
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" +
		"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" + "469dfc14" + "e323",
	// RC ACKNOWLEDGE, local, VL 1, SL 2.
	"1022000200070003" + "1100ffff00000011" + "00123456" + "1f000001" + "bc23053b" + "3eb1",
}

func TestGoldenVectors(t *testing.T) {
	s := samplePackets()
	for i, want := range goldenVectors {
		pkt, err := Build(make([]byte, 512), &s[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(pkt); got != want {
			t.Errorf("vector %d:\n got %s\nwant %s", i, got, want)
		}
		if binary.LittleEndian.Uint32(pkt[len(pkt)-6:]) != refICRC(pkt) || binary.LittleEndian.Uint16(pkt[len(pkt)-2:]) != refVCRC(pkt) {
			t.Errorf("vector %d: CRCs", i)
		}
	}
}

// TestNoAllocs: Build, Parse and the CRCs allocate nothing (the data path
// builds into the fabric's buffers).
func TestNoAllocs(t *testing.T) {
	s := samplePackets()
	out := make([]byte, 8192)
	pkt, _ := Build(make([]byte, 8192), &s[2])
	if n := testing.AllocsPerRun(100, func() {
		if _, err := Build(out, &s[2]); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(pkt); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per Build+Parse", n)
	}
}
