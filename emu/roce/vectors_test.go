package roce

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// loadVectors reads testdata/vectors.txt, the full frames of spec §9.5.
func loadVectors(t testing.TB) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	var name string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "name "):
			name = strings.TrimPrefix(line, "name ")
		default:
			fields := strings.Fields(line)
			b, err := hex.DecodeString(strings.Join(fields[1:], ""))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = append(out[name], b...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	macA = MAC{0x02, 0, 0, 0, 0, 0x0a}
	macB = MAC{0x02, 0, 0, 0, 0, 0x0b}
	ip4A = netip.MustParseAddr("192.168.100.10")
	ip4B = netip.MustParseAddr("192.168.100.11")
	ip6A = netip.MustParseAddr("fd00::a")
	ip6B = netip.MustParseAddr("fd00::b")
)

const (
	qpA = 0x11
	qpB = 0x12
)

func seq(start, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(start + i)
	}
	return b
}

// vector is one test vector of spec §9, described with this package's
// field structs.
type vector struct {
	name  string
	frame FrameFields
	pkt   PacketFields
	len   int    // frame length (§9.4 "Length")
	icrc  string // ICRC wire bytes (§9.4)
}

func specVectors(t testing.TB, frames map[string][]byte) []vector {
	rcAB := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64,
		SrcPort: UDPSourcePort(0, qpA, qpB)}
	rcBA := FrameFields{Dst: macA, Src: macB, SrcIP: ip4B, DstIP: ip4A, HopLimit: 64,
		SrcPort: UDPSourcePort(0, qpB, qpA)}
	with := func(f FrameFields, id uint16) FrameFields { f.IPID = id; return f }
	bth := func(op Opcode, qp, psn uint32, ack bool) BTHFields {
		return BTHFields{Opcode: op, PKey: DefaultPKey, DestQP: qp, PSN: psn, AckReq: ack}
	}
	v7 := frames["V7"]
	if len(v7) != 322 {
		t.Fatalf("V7 is %d bytes", len(v7))
	}
	v5 := bth(RCSendOnly, qpB, 0x123458, true)
	v5.SE = true
	cnp := bth(CNP, 0x118, 0, false)
	cnp.BECN = true
	return []vector{
		{
			name:  "V1",
			frame: with(rcAB, 1),
			pkt:   PacketFields{BTH: bth(RCSendOnly, qpB, 0x123456, true), Payload: seq(0, 64)},
			len:   122, icrc: "4b4a11a4",
		},
		{
			name:  "V2",
			frame: with(rcAB, 2),
			pkt: PacketFields{
				BTH:     bth(RCRDMAWriteFirst, qpB, 0x123457, false),
				RETH:    RETHFields{VA: 0x00007F1234560000, RKey: 0x00ABCDEF, DMALength: 600},
				Payload: seq(0, 256),
			},
			len: 330, icrc: "2234db44",
		},
		{
			name:  "V3",
			frame: with(rcBA, 1),
			pkt: PacketFields{
				BTH:  bth(RCAcknowledge, qpA, 0x123456, false),
				AETH: AETHFields{Syndrome: ACKSyndrome(CreditInvalid), MSN: 1},
			},
			len: 62, icrc: "f6bb3797",
		},
		{
			name:  "V4",
			frame: with(rcBA, 2),
			pkt: PacketFields{
				BTH:  bth(RCAcknowledge, qpA, 0x123456, false),
				AETH: AETHFields{Syndrome: RNRNAKSyndrome(14), MSN: 0},
			},
			len: 62, icrc: "5f083c7b",
		},
		{
			name:  "V5",
			frame: with(rcAB, 3),
			pkt:   PacketFields{BTH: v5, Payload: []byte("Hello from client!")},
			len:   78, icrc: "8507d9e2",
		},
		{
			name: "V6",
			frame: FrameFields{Dst: macB, Src: macA, SrcIP: ip6A, DstIP: ip6B, HopLimit: 64,
				SrcPort: UDPSourcePortHash(qpA), UDPChecksum: true},
			pkt: PacketFields{
				BTH:     bth(UDSendOnly, qpB, 1, false),
				DETH:    DETHFields{QKey: 0x11111111, SrcQP: qpA},
				Payload: seq(0xa0, 32),
			},
			len: 118, icrc: "880e7735",
		},
		{
			name: "V7",
			frame: FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64,
				IPID: 0x10, SrcPort: UDPSourcePortHash(1)},
			pkt: PacketFields{
				BTH:     bth(UDSendOnly, 1, 0, false),
				DETH:    DETHFields{QKey: GSIQKey, SrcQP: 1},
				Payload: v7[62 : 62+256], // the CM REQ MAD
			},
			len: 322, icrc: "b8c83cd2",
		},
		{
			name: "ConnectX-4_Lx_CNP",
			frame: FrameFields{
				Dst: MAC{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2}, Src: MAC{0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32},
				SrcIP: netip.MustParseAddr("10.0.17.1"), DstIP: netip.MustParseAddr("10.0.18.1"),
				TrafficClass: 0xC2, IPID: 0x718c, HopLimit: 64, SrcPort: 0,
			},
			pkt: PacketFields{BTH: cnp},
			len: 74, icrc: "82fd002a",
		},
	}
}

func buildFrame(t testing.TB, v *vector) []byte {
	t.Helper()
	ib := make([]byte, 4200)
	ib, err := Build(ib, &v.pkt)
	if err != nil {
		t.Fatalf("%s: Build: %v", v.name, err)
	}
	out := make([]byte, 4300)
	out, err = Frame(out, &v.frame, ib)
	if err != nil {
		t.Fatalf("%s: Frame: %v", v.name, err)
	}
	return out
}

// TestSpecVectors builds every full frame of spec §9.5 with Build and Frame
// and compares it byte for byte, ICRC included.
func TestSpecVectors(t *testing.T) {
	frames := loadVectors(t)
	vs := specVectors(t, frames)
	if len(vs) != len(frames) {
		t.Fatalf("%d vectors described, %d frames in testdata", len(vs), len(frames))
	}
	for i := range vs {
		v := &vs[i]
		t.Run(v.name, func(t *testing.T) {
			want, ok := frames[v.name]
			if !ok {
				t.Fatalf("no frame %q in testdata", v.name)
			}
			got := buildFrame(t, v)
			if diff := cmp.Diff(hex.Dump(want), hex.Dump(got)); diff != "" {
				t.Errorf("frame mismatch (-spec +built):\n%s", diff)
			}
			if len(got) != v.len {
				t.Errorf("length %d, spec §9.4 says %d", len(got), v.len)
			}
			if g := hex.EncodeToString(got[len(got)-4:]); g != v.icrc {
				t.Errorf("ICRC bytes %s, spec §9.4 says %s", g, v.icrc)
			}
		})
	}
}

// TestSpecVectorsParse decodes every frame of §9.5 and checks that Unframe
// and Parse give back the fields the vectors were built from and that the
// ICRC verifies.
func TestSpecVectorsParse(t *testing.T) {
	frames := loadVectors(t)
	for _, v := range specVectors(t, frames) {
		t.Run(v.name, func(t *testing.T) {
			u, err := Unframe(frames[v.name])
			if err != nil {
				t.Fatalf("Unframe: %v", err)
			}
			if err := u.VerifyICRC(); err != nil {
				t.Errorf("VerifyICRC: %v", err)
			}
			wantF := v.frame
			wantF.SrcIP, wantF.DstIP = wantF.SrcIP.Unmap(), wantF.DstIP.Unmap()
			if diff := cmp.Diff(wantF, u.FrameFields, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("frame fields (-want +got):\n%s", diff)
			}
			p, err := Parse(u.IB)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := v.pkt
			want.BTH.PadCount = uint8(PadCount(len(want.Payload)))
			if want.Payload == nil {
				want.Payload = []byte{}
			}
			if diff := cmp.Diff(want, p.Fields()); diff != "" {
				t.Errorf("packet fields (-want +got):\n%s", diff)
			}
			if got := hex.EncodeToString(p.ICRC); got != v.icrc {
				t.Errorf("ICRC %s, want %s", got, v.icrc)
			}
		})
	}
}

// TestScapyUCSample checks the scapy sample of §9.4 ("SC"), for which the
// spec gives only the ICRC; the payload is the one in scapy's roce.uts.
func TestScapyUCSample(t *testing.T) {
	mac := MAC{0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22}
	ip := netip.MustParseAddr("192.168.0.7")
	ff := FrameFields{Dst: mac, Src: mac, SrcIP: ip, DstIP: ip, TrafficClass: 1, IPID: 1144,
		HopLimit: 64, SrcPort: 49152}
	payload, _ := hex.DecodeString("4630818be28935d90e9a955054" + "01be885e50")
	pf := PacketFields{
		BTH:     BTHFields{Opcode: UCSendOnly, MigReq: true, PKey: 0xFFFF, DestQP: 211, PSN: 13571856},
		Payload: payload,
	}
	v := vector{name: "SC", frame: ff, pkt: pf}
	got := buildFrame(t, &v)
	if len(got) != 78 {
		t.Errorf("length %d, want 78", len(got))
	}
	if got[43] != 0x60 {
		t.Errorf("BTH byte 1 = %#x, want 0x60 (M=1, PadCnt 2)", got[43])
	}
	if c := binary.BigEndian.Uint16(got[24:]); c != 0xb4d5 {
		t.Errorf("IPv4 checksum %#x, want 0xb4d5 (scapy)", c)
	}
	if g := hex.EncodeToString(got[len(got)-4:]); g != "78f353f3" {
		t.Errorf("ICRC %s, want 78f353f3", g)
	}
}

// TestICRCWorkedMasking checks the masked CRC inputs printed in spec §1.10
// against hash/crc32 directly, and that ICRC agrees.
func TestICRCWorkedMasking(t *testing.T) {
	ff8 := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if got := crc32.ChecksumIEEE(ff8); got != ^uint32(icrcSeed) {
		t.Errorf("CRC of 8×FF = %#x, want ^0xDEBB20E3", got)
	}
	cases := []struct {
		name   string
		masked string
		want   uint32
	}{
		{"V1", "45ff006c00014000ff11ffffc0a8640ac0a8640b" + "c13212b70058ffff" + "0400ffffff00001280123456" +
			hex.EncodeToString(seq(0, 64)), 0xA4114A4B},
		{"V6", "6fffffff004011ff" + "fd00000000000000000000000000000a" + "fd00000000000000000000000000000b" +
			"df9412b70040ffff" + "6400ffffff00001200000001" + "1111111100000011" +
			hex.EncodeToString(seq(0xa0, 32)), 0x35770E88},
	}
	frames := loadVectors(t)
	for _, c := range cases {
		in, err := hex.DecodeString(c.masked)
		if err != nil {
			t.Fatal(err)
		}
		if got := crc32.ChecksumIEEE(append(append([]byte{}, ff8...), in...)); got != c.want {
			t.Errorf("%s: crc32 of the spec's masked input = %#x, want %#x", c.name, got, c.want)
		}
		if got := crc32.Update(^uint32(icrcSeed), crc32.IEEETable, in); got != c.want {
			t.Errorf("%s: rxe formulation = %#x, want %#x", c.name, got, c.want)
		}
		u, err := Unframe(frames[c.name])
		if err != nil {
			t.Fatal(err)
		}
		got, err := ICRC(u.IP, u.UDP, u.IB)
		if err != nil || got != c.want {
			t.Errorf("%s: ICRC = %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
}

// TestICRCMasking checks that changing a masked field leaves the ICRC alone
// and changing any other covered byte changes it.
func TestICRCMasking(t *testing.T) {
	frames := loadVectors(t)
	for _, name := range []string{"V1", "V6"} {
		frame := append([]byte(nil), frames[name]...)
		u, err := Unframe(frame)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := ICRC(u.IP, u.UDP, u.IB)
		var masked map[int]bool
		if len(u.IP) == IPv4HeaderSize {
			masked = map[int]bool{1: true, 8: true, 10: true, 11: true, 20 + 6: true, 20 + 7: true, 28 + 4: true}
		} else {
			masked = map[int]bool{1: true, 2: true, 3: true, 7: true, 40 + 6: true, 40 + 7: true, 48 + 4: true}
		}
		// The contiguous IP|UDP|IB region starts at u.IP.
		region := frame[14 : 14+len(u.IP)+len(u.UDP)+len(u.IB)-ICRCSize]
		for i := range region {
			region[i] ^= 0x01
			got, err := ICRC(u.IP, u.UDP, u.IB)
			region[i] ^= 0x01
			if i == 0 {
				// Flipping the low bit of 0x45/0x60 breaks the header form
				// (IHL 4) for IPv4, or hits the masked TC nibble for IPv6.
				if len(u.IP) == IPv4HeaderSize {
					if err == nil {
						t.Errorf("%s: IHL 4 accepted", name)
					}
				} else if got != ref {
					t.Errorf("%s: byte 0 low nibble is masked but changed the ICRC", name)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s byte %d: %v", name, i, err)
			}
			if masked[i] && got != ref {
				t.Errorf("%s: masked byte %d changed the ICRC", name, i)
			}
			if !masked[i] && got == ref {
				t.Errorf("%s: covered byte %d did not change the ICRC", name, i)
			}
		}
	}
}

func TestVerifyICRCRejectsCorruption(t *testing.T) {
	frames := loadVectors(t)
	for name, f := range frames {
		for _, off := range []int{len(f) - 1, len(f) - 5, 50} {
			// Unframe first: the UDP checksum of V6 would catch the
			// corruption before the ICRC does.
			b := append([]byte(nil), f...)
			u, err := Unframe(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b[off] ^= 0x80
			if err := u.VerifyICRC(); err != ErrBadICRC {
				t.Errorf("%s: corrupt byte %d: VerifyICRC = %v, want ErrBadICRC", name, off, err)
			}
		}
	}
}

func TestUDPSourcePort(t *testing.T) {
	if p := UDPSourcePort(0, 0x11, 0x12); p != 0xC132 {
		t.Errorf("UDPSourcePort(0, 0x11, 0x12) = %#x, want 0xC132", p)
	}
	if p := UDPSourcePort(0, 0x12, 0x11); p != 0xC132 {
		t.Errorf("not symmetric: %#x", p)
	}
	if p := UDPSourcePortHash(0x11); p != 0xDF94 {
		t.Errorf("UDPSourcePortHash(0x11) = %#x, want 0xDF94", p)
	}
	if p := UDPSourcePortHash(1); p != 0xD872 {
		t.Errorf("UDPSourcePortHash(1) = %#x, want 0xD872", p)
	}
	for _, q := range [][2]uint32{{0, 0}, {0xFFFFFF, 0xFFFFFF}, {16, 17}, {1, 0xABCDEF}} {
		if p := UDPSourcePort(0, q[0], q[1]); p < 0xC000 {
			t.Errorf("UDPSourcePort(0, %#x, %#x) = %#x < 0xC000", q[0], q[1], p)
		}
	}
	// A given flow label takes precedence over the QPNs.
	if UDPSourcePort(0x12345, 1, 2) != UDPSourcePort(0x12345, 3, 4) {
		t.Error("flow label ignored")
	}
}
