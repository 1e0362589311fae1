package fabric

import (
	"net/netip"
	"testing"
)

// FuzzSegment sends arbitrary frames into a segment of two guests (NIC and
// HCA each) and an uplink, from each kind of port. Oracle: nothing panics;
// no frame returns to the port it came from; an HCA gets only RoCEv2 for
// one of its own addresses; a frame from a MAC of another station's NIC,
// or RoCEv2 from another station's HCA address, reaches nobody; every
// frame delivered is the one sent (a flooded copy equal to it).
func FuzzSegment(f *testing.F) {
	f.Add(byte(0), ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791))
	f.Add(byte(1), ether(bcast, stationMAC(1), 0x0806, make([]byte, 28)))
	f.Add(byte(2), ipFrame([6]byte{2, 9, 9, 9, 9, 9}, [6]byte{2, 8, 8, 8, 8, 8}, "10.0.0.9", "10.0.0.2", 4791))
	f.Add(byte(3), ipFrame(stationMAC(0), stationMAC(1), "fe80::2", "fe80::1", 4791))
	f.Add(byte(2), ipFrame(stationMAC(0), stationMAC(1), "10.0.0.2", "10.0.0.1", 4791))
	f.Fuzz(func(t *testing.T, from byte, frame []byte) {
		if len(frame) > FrameSize {
			return
		}
		sw := NewSwitch()
		type port struct {
			p    *Port
			hca  bool
			st   int // station: 0, 1; 2 = the uplink
			addr []netip.Addr
		}
		var ports []*port
		var got []struct {
			to    *port
			frame []byte
		}
		attach := func(pt *port, mk func(rx Receiver) *Port) {
			pt.p = mk(func(f []byte) bool {
				got = append(got, struct {
					to    *port
					frame []byte
				}{pt, append([]byte(nil), f...)})
				Release(f)
				return true
			})
			ports = append(ports, pt)
		}
		for st := range 2 {
			mac := stationMAC(byte(st))
			attach(&port{st: st}, func(rx Receiver) *Port { p, _ := sw.AttachNIC("nic", mac, rx); return p })
			h := &port{st: st, hca: true, addr: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(st + 1)}),
				netip.MustParseAddr("fe80::" + string(rune('1'+st)))}}
			attach(h, func(rx Receiver) *Port { return sw.Attach("hca", mac, rx) })
			if err := h.p.SetAddrs(h.addr); err != nil {
				t.Fatal(err)
			}
		}
		attach(&port{st: 2}, func(rx Receiver) *Port { return sw.AttachUplink("up", rx) })
		sender := ports[int(from)%len(ports)]
		sender.p.Send(Clone(frame))

		srcMAC := [6]byte{}
		if len(frame) >= 12 {
			srcMAC = [6]byte(frame[6:12])
		}
		src, hasSrc := SrcIP(frame)
		for _, g := range got {
			if string(g.frame) != string(frame) {
				t.Fatalf("delivered frame differs from the one sent")
			}
			if g.to == sender && !(g.to.hca && sender.hca) {
				t.Fatalf("a NIC's frame came back to it")
			}
			if g.to.hca {
				dst, ok := DstIP(frame)
				if !ok || !IsRoCE(frame) || !g.to.p.Owns(dst) {
					t.Fatalf("HCA of station %d got a frame that is not RoCEv2 to its address", g.to.st)
				}
			}
			for st := range 2 {
				if st != sender.st && srcMAC == stationMAC(byte(st)) {
					t.Fatalf("a frame from station %d's MAC sent by station %d was delivered", st, sender.st)
				}
				if st != sender.st && hasSrc && IsRoCE(frame) && (src.Unmap() == netip.AddrFrom4([4]byte{10, 0, 0, byte(st + 1)})) {
					t.Fatalf("RoCEv2 from station %d's HCA address sent by station %d was delivered", st, sender.st)
				}
			}
		}
	})
}
