package fabric

import (
	"net/netip"
	"testing"
)

// batchTaker is a DirectReceiver with room for room batches.
type batchTaker struct {
	room int
	got  []*Batch
}

func (r *batchTaker) Reserve() bool {
	if r.room == 0 {
		return false
	}
	r.room--
	return true
}

func (r *batchTaker) Deliver(b *Batch) { r.got = append(r.got, b) }

func TestDirectPort(t *testing.T) {
	ipA, ipB, ipN := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.9")
	quiet := true
	s := NewSwitch(func(next Link) Link { return next })
	a := s.Attach("a", [6]byte{2, 0, 0, 0, 0, 1}, func([]byte) bool { return true })
	b := s.Attach("b", [6]byte{2, 0, 0, 0, 0, 2}, func([]byte) bool { return true })
	c := s.Attach("c", [6]byte{2, 0, 0, 0, 0, 3}, func([]byte) bool { return true })
	nic, err := s.AttachNIC("nic", [6]byte{2, 0, 0, 0, 0, 4}, func([]byte) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	for p, ip := range map[*Port]netip.Addr{a: ipA, b: ipB, c: netip.MustParseAddr("10.0.0.3")} {
		if err := p.SetAddrs([]netip.Addr{ip}); err != nil {
			t.Fatal(err)
		}
	}
	rb := &batchTaker{room: 1}
	b.SetDirect(rb)
	nic.SetDirect(&batchTaker{room: 9}) // a NIC never takes batches

	if a.Direct(ipA, ipB) != nil {
		t.Fatal("a decorated switch skips frames without AllowDirect")
	}
	s.AllowDirect(func() bool { return quiet })
	cases := []struct {
		name     string
		from     *Port
		src, dst netip.Addr
		want     *Port
	}{
		{"to an HCA that takes batches", a, ipA, ipB, b},
		{"from an address the port does not own", a, ipB, ipB, nil},
		{"from another's address", a, netip.MustParseAddr("10.0.0.3"), ipB, nil},
		{"to an HCA that takes frames only", a, ipA, netip.MustParseAddr("10.0.0.3"), nil},
		{"to an address nobody owns", a, ipA, ipN, nil},
		{"from a NIC", nic, ipN, ipB, nil},
	}
	for _, tc := range cases {
		if got := tc.from.Direct(tc.src, tc.dst); got != tc.want {
			t.Errorf("%s: Direct = %v", tc.name, got)
		}
	}
	quiet = false
	if a.Direct(ipA, ipB) != nil {
		t.Fatal("frames skipped while a decorator looks at them")
	}
	quiet = true

	// Room is reserved before a batch is filled: a full receiver refuses
	// the batch up front, and nothing built is lost.
	batch := a.Open(b)
	if batch == nil {
		t.Fatal("Open refused with room")
	}
	if a.Open(b) != nil {
		t.Fatal("Open beyond the receiver's room")
	}
	room := batch.Room()
	copy(room, "abcd")
	batch.Add(ipA, ipB, room[:4], 64, 1)
	batch.Add(ipA, ipB, batch.Room()[:8], 3*64, 3) // a run counts as its packets
	a.Flush(batch)
	if len(rb.got) != 1 || string(rb.got[0].Packets[0].IB) != "abcd" || rb.got[0].Count() != 4 ||
		s.Direct.Load() != 4 || s.DirectRuns.Load() != 3 || s.Forwarded.Load() != 4 {
		t.Fatalf("delivered %v, direct %d forwarded %d", rb.got, s.Direct.Load(), s.Forwarded.Load())
	}
	rb.got[0].Release()

	// A batch for a port gone since counts as dropped; Direct gives it no
	// more.
	rb.room = 1
	batch = a.Open(b)
	batch.Add(ipA, ipB, batch.Room()[:4], 64, 1)
	b.Detach()
	a.Flush(batch)
	if s.Dropped.Load() != 1 || a.Direct(ipA, ipB) != nil {
		t.Fatalf("dropped %d, Direct to a detached port %v", s.Dropped.Load(), a.Direct(ipA, ipB))
	}

	// A batch holds at most BatchPackets packets.
	batch = &Batch{buf: make([]byte, BatchBytes)}
	for range BatchPackets {
		batch.Add(ipA, ipB, batch.Room()[:8], 64, 1)
	}
	if len(batch.Room()) != 0 {
		t.Fatal("room beyond BatchPackets")
	}
}
