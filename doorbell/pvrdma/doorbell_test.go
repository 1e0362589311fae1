package pvrdma

import "testing"

func TestDecode(t *testing.T) {
	cases := []struct {
		name string
		off  uint64
		size int
		val  uint32
		want Doorbell
		ok   bool
	}{
		{"kernel QP send", 0x0, 4, 1 | QPSend, Doorbell{0, QP, 1, QPSend}, true},
		{"user QP recv", 3*4096 + 0x0, 4, 7 | QPRecv, Doorbell{3, QP, 7, QPRecv}, true},
		{"CQ arm", 0x4, 4, 5 | CQArm, Doorbell{0, CQ, 5, CQArm}, true},
		{"CQ arm solicited", 4096 + 0x4, 4, 5 | CQArmSol, Doorbell{1, CQ, 5, CQArmSol}, true},
		{"CQ poll", 0x4, 4, 0xFFFFFF | CQPoll, Doorbell{0, CQ, 0xFFFFFF, CQPoll}, true},
		{"SRQ", 2*4096 + 0x8, 4, 9 | SRQRecv, Doorbell{2, SRQ, 9, SRQRecv}, true},
		{"offset 0xC", 0xC, 4, 1, Doorbell{}, false},
		{"unaligned", 0x2, 4, 1, Doorbell{}, false},
		{"two bytes", 0x0, 2, 1, Doorbell{}, false},
		{"eight bytes", 0x0, 8, 1, Doorbell{}, false},
		{"page offset 0x800", 0x800, 4, 1, Doorbell{}, false},
	}
	for _, c := range cases {
		got, ok := Decode(c.off, c.size, c.val)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// FuzzDecode: any write decodes to nothing or to a doorbell whose handle
// fits 24 bits and whose page is the write's page.
func FuzzDecode(f *testing.F) {
	f.Add(uint64(0), 4, uint32(1<<30|1))
	f.Fuzz(func(t *testing.T, off uint64, size int, val uint32) {
		d, ok := Decode(off, size, val)
		if ok && (d.Handle > HandleMask || uint64(d.Page) != off>>12 || d.Handle|d.Flags != val) {
			t.Fatalf("%#x/%d/%#x -> %+v", off, size, val, d)
		}
	})
}
