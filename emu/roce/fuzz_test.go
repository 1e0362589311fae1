package roce

import (
	"bytes"
	"testing"
)

func addIBSeeds(f *testing.F) {
	for _, fr := range loadVectors(f) {
		if u, err := Unframe(fr); err == nil {
			f.Add(append([]byte(nil), u.IB...))
		}
	}
	for _, pf := range allOpcodeSamples() {
		b, err := Build(make([]byte, 512), &pf)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
}

// normalize returns a copy of the parsed packet b with the bits Build writes
// as zero (reserved bits, which receivers ignore) cleared and the ICRC
// zeroed.
func normalize(p *Packet, b []byte) []byte {
	n := append([]byte(nil), b...)
	n[4] &= 0xC0
	n[8] &= 0x80
	if p.DETH != nil {
		n[BTHSize+4] = 0
	}
	if p.XRCETH != nil {
		n[BTHSize] = 0 // the XRCETH's reserved byte (it follows the BTH: XRC has no DETH)
	}
	if p.CNPPad != nil {
		clear(n[BTHSize : BTHSize+CNPPadSize])
	}
	clear(n[len(n)-ICRCSize:])
	return n
}

// FuzzParse checks that Parse never panics, that a parsed packet's views
// tile the input, and that Build(Fields()) reproduces the input except for
// reserved bits and the ICRC.
func FuzzParse(f *testing.F) {
	addIBSeeds(f)
	buf := make([]byte, 1<<16+64)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		if got := p.HeaderLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); got != len(b) {
			t.Fatalf("views cover %d of %d bytes", got, len(b))
		}
		if p.HeaderLen != p.Opcode().HeaderLen() || int(p.BTH.PadCount()) != len(p.Pad) {
			t.Fatalf("header length %d / pad %d inconsistent", p.HeaderLen, len(p.Pad))
		}
		_ = p.ICRCValue()
		fields := p.Fields()
		out, err := Build(buf, &fields)
		if err != nil {
			t.Fatalf("Build of parsed fields: %v", err)
		}
		if want := normalize(&p, b); !bytes.Equal(out, want) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", out, want)
		}
	})
}

// FuzzUnframe checks that Unframe (and Parse and VerifyICRC on its result)
// never panic, and that Frame(Unframe(x)) reproduces x up to the end of the
// IP datagram.
func FuzzUnframe(f *testing.F) {
	for _, fr := range loadVectors(f) {
		f.Add(fr)
	}
	// A VLAN-tagged IPv6 frame with a UDP checksum, and a padded short frame.
	ib, _ := Build(make([]byte, 64), &PacketFields{BTH: BTHFields{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: 7}, Payload: []byte{1, 2, 3}})
	ff := FrameFields{SrcIP: ip6A, DstIP: ip6B, VLAN: true, VLANTCI: 5, UDPChecksum: true, HopLimit: 1, FlowLabel: 0x12345}
	fr, _ := Frame(make([]byte, 256), &ff, ib)
	f.Add(fr)
	ib, _ = Build(make([]byte, 64), &PacketFields{BTH: BTHFields{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: 7}})
	ff = FrameFields{SrcIP: ip4A, DstIP: ip4B}
	fr, _ = Frame(make([]byte, 256), &ff, ib)
	f.Add(fr)

	buf := make([]byte, 1<<17)
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := Unframe(b)
		if err != nil {
			return
		}
		icrcErr := u.VerifyICRC()
		if p, err := Parse(u.IB); err == nil && p.HeaderLen > len(u.IB) {
			t.Fatal("header beyond packet")
		}
		ff := u.FrameFields
		ff.KeepICRC = true
		out, err := Frame(buf, &ff, u.IB)
		if err != nil {
			t.Fatalf("Frame of unframed fields: %v", err)
		}
		// End of the IP datagram: Unframe insists that UDP length equals the
		// IP payload length.
		end := EthernetHeaderSize + len(u.IP) + len(u.UDP) + len(u.IB)
		if u.VLAN {
			end += VLANTagSize
		}
		if end > len(b) {
			t.Fatalf("bad end %d", end)
		}
		if !bytes.Equal(out[:end], b[:end]) {
			t.Fatalf("re-framing differs:\n got % x\nwant % x", out[:end], b[:end])
		}
		u2, err := Unframe(out)
		if err != nil {
			t.Fatalf("Unframe of re-framed: %v", err)
		}
		if u2.FrameFields != u.FrameFields || !bytes.Equal(u2.IB, u.IB) {
			t.Fatal("re-framed frame decodes differently")
		}
		if (u2.VerifyICRC() == nil) != (icrcErr == nil) {
			t.Fatal("ICRC verdict changed")
		}
	})
}
