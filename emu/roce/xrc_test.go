package roce

import (
	"bytes"
	"testing"
)

// TestXRCETHLayout: the XRCETH follows the BTH of an XRC request (before
// the RETH), its SRQ number in the low 24 bits, and parses back; a
// response has none; an SRQ number beyond 24 bits is refused.
func TestXRCETHLayout(t *testing.T) {
	f := PacketFields{BTH: BTHFields{Opcode: RCRDMAWriteOnly.XRC(), PKey: DefaultPKey, DestQP: 0x42, PSN: 7},
		XRCETH: 0x123456, RETH: RETHFields{VA: 0x1122334455667788, RKey: 0xabcdef01, DMALength: 4}, Payload: []byte("data")}
	b, err := Build(make([]byte, 256), &f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[12:16], []byte{0, 0x12, 0x34, 0x56}) || !bytes.Equal(b[16:24], []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}) {
		t.Fatalf("XRCETH/RETH bytes % x", b[12:32])
	}
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.XRCETH.SRQ() != 0x123456 || p.RETH.RKey() != 0xabcdef01 || string(p.Payload) != "data" || p.HeaderLen != 32 {
		t.Fatalf("parsed %+v", p.Fields())
	}
	if got := p.Fields(); got.XRCETH != 0x123456 {
		t.Fatalf("Fields XRCETH %#x", got.XRCETH)
	}
	ack := PacketFields{BTH: BTHFields{Opcode: RCAcknowledge.XRC(), DestQP: 1}, XRCETH: 9}
	b, err = Build(make([]byte, 64), &ack)
	if err != nil || len(b) != BTHSize+AETHSize+ICRCSize {
		t.Fatalf("XRC ACK: %d bytes, %v", len(b), err)
	}
	f.XRCETH = 1 << 24
	if _, err := Build(make([]byte, 256), &f); err != ErrFieldRange {
		t.Fatalf("XRCETH of 25 bits: %v", err)
	}
}

// TestXRCOpcodes: XRC and RC map the RC operations to their XRC opcodes
// and back, and leave every other opcode alone.
func TestXRCOpcodes(t *testing.T) {
	for o := range 256 {
		op := Opcode(o)
		x := op.XRC()
		switch {
		case op.Transport() == TransportRC && op.Valid() && op <= RCSendOnlyWithInvalidate:
			if x != op+0xA0 || x.RC() != op || x.Transport() != TransportXRC {
				t.Errorf("%v: XRC %v RC %v", op, x, x.RC())
			}
		case x != op:
			t.Errorf("%v: XRC = %v", op, x)
		}
		if op.Transport() != TransportXRC && op.RC() != op {
			t.Errorf("%v: RC = %v", op, op.RC())
		}
	}
}
