package ib

import (
	"bytes"
	"testing"
)

// canonical returns pkt (which parses) with every reserved bit cleared and
// its CRCs recomputed: what Build makes of its parsed fields.
func canonical(t *testing.T, pkt []byte) []byte {
	c := bytes.Clone(pkt)
	p, err := Parse(c)
	if err != nil {
		t.Fatalf("a packet that parsed does not parse again: %v", err)
	}
	c[1] &^= 0x0C // LRH reserved
	c[4] &^= 0xF8
	p.Transport.BTH[4] &= 0xC0 // FECN, BECN kept
	p.Transport.BTH[8] &= 0x80 // AckReq kept
	if p.Transport.DETH != nil {
		p.Transport.DETH[4] = 0
	}
	if p.Transport.XRCETH != nil {
		p.Transport.XRCETH[0] = 0 // reserved above the XRC SRQ number
	}
	clear(p.Transport.CNPPad)
	_ = PutICRC(c)
	_ = PutVCRC(c)
	return c
}

// FuzzParse feeds arbitrary bytes to Parse and ParseLink. Beyond not
// panicking: ParseLink accepts whatever Parse accepts; a packet that
// parses is rebuilt by Build from its fields into exactly its canonical
// bytes (reserved bits zero), which parse into the same fields; and a
// packet that fails ParseLink fails Parse with the same error.
func FuzzParse(f *testing.F) {
	for _, s := range samplePackets() {
		pkt, err := Build(make([]byte, 8192), &s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pkt)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 26))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, lerr := ParseLink(b)
		_, err := Parse(b)
		if lerr != nil {
			if err != lerr {
				t.Fatalf("ParseLink: %v, Parse: %v", lerr, err)
			}
			return
		}
		roundTrip(t, b)
		// The same bytes with their CRCs made right, so that the fuzzer
		// reaches the transport checks behind them.
		c := bytes.Clone(b)
		_ = PutICRC(c)
		_ = PutVCRC(c)
		roundTrip(t, c)
	})
}

// roundTrip checks a packet that passed ParseLink: if it parses, Build of
// its fields is its canonical bytes, which parse into the same fields.
func roundTrip(t *testing.T, b []byte) {
	p, err := Parse(b)
	if err != nil {
		return
	}
	fields := p.Fields()
	out, err := Build(make([]byte, len(b)+64), &fields)
	if err != nil {
		t.Fatalf("Build of parsed fields: %v", err)
	}
	if want := canonical(t, b); !bytes.Equal(out, want) {
		t.Fatalf("rebuilt packet differs:\n got %x\nwant %x", out, want)
	}
	q, err := Parse(out)
	if err != nil {
		t.Fatalf("rebuilt packet does not parse: %v", err)
	}
	if q.LRH.Fields() != p.LRH.Fields() || (q.GRH == nil) != (p.GRH == nil) ||
		(q.GRH != nil && q.GRH.Fields() != p.GRH.Fields()) ||
		!bytes.Equal(q.Transport.Payload, p.Transport.Payload) {
		t.Fatal("rebuilt packet parses into other fields")
	}
}
