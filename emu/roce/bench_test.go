package roce

import "testing"

func benchSend4K() (PacketFields, FrameFields) {
	pf := PacketFields{
		BTH:     BTHFields{Opcode: RCSendOnly, PKey: DefaultPKey, DestQP: qpB, AckReq: true, PSN: 0x123456},
		Payload: seq(0, 4096),
	}
	ff := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64, IPID: 1,
		SrcPort: UDPSourcePort(0, qpA, qpB)}
	return pf, ff
}

// BenchmarkBuild4K lays out a 4 KiB RC SEND_ONLY transport packet (copying
// the payload), without the ICRC.
func BenchmarkBuild4K(b *testing.B) {
	pf, _ := benchSend4K()
	out := make([]byte, 8192)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(out, &pf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildFrame4K builds the complete wire frame of a 4 KiB RC
// SEND_ONLY in place (Build at FrameHeaderLen, then Frame): payload copy,
// headers, IPv4 checksum and ICRC.
func BenchmarkBuildFrame4K(b *testing.B) {
	pf, ff := benchSend4K()
	out := make([]byte, 8192)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		hl, err := FrameHeaderLen(&ff)
		if err != nil {
			b.Fatal(err)
		}
		ib, err := Build(out[hl:], &pf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Frame(out, &ff, ib); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildFrame4KIPv6 is BenchmarkBuildFrame4K over IPv6 with a UDP
// checksum.
func BenchmarkBuildFrame4KIPv6(b *testing.B) {
	pf, ff := benchSend4K()
	ff.SrcIP, ff.DstIP, ff.UDPChecksum = ip6A, ip6B, true
	out := make([]byte, 8192)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		hl, _ := FrameHeaderLen(&ff)
		ib, err := Build(out[hl:], &pf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Frame(out, &ff, ib); err != nil {
			b.Fatal(err)
		}
	}
}

func benchFrame4K(b *testing.B) []byte {
	pf, ff := benchSend4K()
	ib, err := Build(make([]byte, 8192), &pf)
	if err != nil {
		b.Fatal(err)
	}
	fr, err := Frame(make([]byte, 8192), &ff, ib)
	if err != nil {
		b.Fatal(err)
	}
	return fr
}

// BenchmarkParse4K parses the transport part of a 4 KiB RC SEND_ONLY.
func BenchmarkParse4K(b *testing.B) {
	fr := benchFrame4K(b)
	ib := fr[42:]
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(ib); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceive4K is the full receive path of a 4 KiB RC SEND_ONLY frame:
// Unframe, VerifyICRC, Parse.
func BenchmarkReceive4K(b *testing.B) {
	fr := benchFrame4K(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		u, err := Unframe(fr)
		if err != nil {
			b.Fatal(err)
		}
		if err := u.VerifyICRC(); err != nil {
			b.Fatal(err)
		}
		if _, err := Parse(u.IB); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkICRC4K computes the ICRC of a 4 KiB RC SEND_ONLY.
func BenchmarkICRC4K(b *testing.B) {
	fr := benchFrame4K(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRC(fr[14:34], fr[34:42], fr[42:]); err != nil {
			b.Fatal(err)
		}
	}
}
