package roce

import (
	"bytes"
	"testing"
)

// TestRun: a run of MIDDLE packets builds and parses back; taken apart, it
// is the packets its sender would have sent one at a time; anything that
// is not n full-PMTU MIDDLE payloads is refused.
func TestRun(t *testing.T) {
	payload := make([]byte, 3*1024)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	f := PacketFields{BTH: BTHFields{Opcode: RCRDMAWriteMiddle, PKey: DefaultPKey, DestQP: 0x123, PSN: Mask24 - 1, AckReq: true},
		Payload: payload}
	b, err := BuildRun(make([]byte, 4096), &f, 3)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := RunLen(f.BTH.Opcode, len(payload), 3); err != nil || n != len(b) {
		t.Fatalf("RunLen %d, %v; built %d bytes", n, err, len(b))
	}
	run, err := ParseRun(b, 3)
	if err != nil || !bytes.Equal(run.Payload, payload) {
		t.Fatalf("ParseRun: %v", err)
	}
	var bth [BTHSize]byte
	for i := range 3 {
		one := RunPacket(&run, i, 3, bth[:])
		want := f
		want.BTH.PSN = PSNAdd(f.BTH.PSN, i) // wraps past 2^24
		want.BTH.AckReq = i == 2
		want.Payload = payload[i*1024 : (i+1)*1024]
		wantB, err := Build(make([]byte, 2048), &want)
		if err != nil {
			t.Fatal(err)
		}
		wantPkt, err := Parse(wantB)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(one.BTH, wantPkt.BTH) || !bytes.Equal(one.Payload, wantPkt.Payload) || one.HeaderLen != wantPkt.HeaderLen {
			t.Errorf("packet %d of the run: BTH % x payload %d bytes, want % x, %d bytes", i, []byte(one.BTH), len(one.Payload),
				[]byte(wantPkt.BTH), len(wantPkt.Payload))
		}
	}
	if !bytes.Equal(run.BTH, b[:BTHSize]) {
		t.Error("taking the run apart changed its own BTH")
	}

	for _, c := range []struct {
		name string
		op   Opcode
		size int
		n    int
	}{
		{"not a MIDDLE", RCRDMAWriteFirst, 2048, 2},
		{"a LAST", RCSendLast, 2048, 2},
		{"not n payloads", RCSendMiddle, 2000, 2},
		{"not a PMTU each", RCSendMiddle, 3 * 100, 3},
		{"no packets", RCSendMiddle, 1024, 0},
		{"negative", RCSendMiddle, 1024, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := PacketFields{BTH: BTHFields{Opcode: c.op}, Payload: make([]byte, c.size)}
			if _, err := BuildRun(make([]byte, 8192), &f, c.n); err != ErrPayloadLength {
				t.Errorf("BuildRun: %v, want %v", err, ErrPayloadLength)
			}
			if _, err := RunLen(c.op, c.size, c.n); err != ErrPayloadLength {
				t.Errorf("RunLen: %v, want %v", err, ErrPayloadLength)
			}
			b := make([]byte, c.op.HeaderLen()+c.size+ICRCSize)
			b[0] = byte(c.op)
			if _, err := ParseRun(b, c.n); err == nil {
				t.Error("ParseRun took it")
			}
		})
	}
}

// FuzzParseRun checks that ParseRun never panics, that a parsed run's views
// tile the input, that BuildRun reproduces it, and that its packets taken
// apart each build and parse as one packet whose payloads, end to end, are
// the run's.
func FuzzParseRun(f *testing.F) {
	for _, n := range []int{1, 2, 5} {
		pf := PacketFields{BTH: BTHFields{Opcode: RCSendMiddle, PSN: Mask24}, Payload: make([]byte, n*256)}
		b, err := BuildRun(make([]byte, 8192), &pf, n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(n))
	}
	f.Add(make([]byte, 16), uint8(3))
	out := make([]byte, 1<<16+64)
	one := make([]byte, 8192)
	f.Fuzz(func(t *testing.T, b []byte, count uint8) {
		n := int(count % 9)
		p, err := ParseRun(b, n)
		if err != nil {
			return
		}
		if got := p.HeaderLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); got != len(b) {
			t.Fatalf("views cover %d of %d bytes", got, len(b))
		}
		fields := p.Fields()
		built, err := BuildRun(out, &fields, n)
		if err != nil {
			t.Fatalf("BuildRun of parsed fields: %v", err)
		}
		if want := normalize(&p, b); !bytes.Equal(built, want) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", built, want)
		}
		var bth [BTHSize]byte
		var all []byte
		for i := range n {
			pkt := RunPacket(&p, i, n, bth[:])
			f1 := pkt.Fields()
			b1, err := Build(one, &f1)
			if err != nil {
				t.Fatalf("packet %d of %d: %v", i, n, err)
			}
			if _, err := Parse(b1); err != nil {
				t.Fatalf("packet %d of %d does not parse: %v", i, n, err)
			}
			if pkt.BTH.PSN() != PSNAdd(p.BTH.PSN(), i) || pkt.BTH.AckReq() != (p.BTH.AckReq() && i == n-1) {
				t.Fatalf("packet %d of %d: PSN %d AckReq %v", i, n, pkt.BTH.PSN(), pkt.BTH.AckReq())
			}
			all = append(all, pkt.Payload...)
		}
		if !bytes.Equal(all, p.Payload) {
			t.Fatal("the packets' payloads are not the run's")
		}
	})
}
