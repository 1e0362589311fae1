package rc

import (
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// TestReceiveFromChecksAddresses: a connected QP takes a packet only when
// the frame's IP source is its path's destination and the IP destination
// its path's source (rxe's check_addr), compared as the device sends: a
// path over IPv4 (from IPv4-mapped GIDs) is not reached from IPv6, nor a
// link-local path from the same host's IPv4 address. A packet from
// anywhere else changes nothing: no data, no completion, no response.
func TestReceiveFromChecksAddresses(t *testing.T) {
	addr := netip.MustParseAddr
	v4 := transport.Path{Src: addr("10.0.0.2"), Dst: addr("10.0.0.1")}
	ll := transport.Path{Src: addr("fe80::250:56ff:fe00:2"), Dst: addr("fe80::250:56ff:fe00:1")}
	tests := []struct {
		name     string
		path     transport.Path
		noPath   bool
		state    transport.State // 0: RTS
		src, dst netip.Addr
		accepted bool // ReceiveFrom's answer
		acts     bool // the SEND lands
	}{
		{"IPv4 from the peer", v4, false, 0, addr("10.0.0.1"), addr("10.0.0.2"), true, true},
		{"IPv4 from a third host", v4, false, 0, addr("10.0.0.3"), addr("10.0.0.2"), false, false},
		{"IPv4 from the QP's own address", v4, false, 0, addr("10.0.0.2"), addr("10.0.0.2"), false, false},
		{"IPv4 to another address of this host", v4, false, 0, addr("10.0.0.1"), addr("10.0.0.9"), false, false},
		{"IPv4 source and destination swapped", v4, false, 0, addr("10.0.0.2"), addr("10.0.0.1"), false, false},
		{"IPv4 path, peer's IPv4 as mapped IPv6", v4, false, 0, addr("::ffff:10.0.0.1"), addr("::ffff:10.0.0.2"), false, false},
		{"IPv4 path, peer's link-local", v4, false, 0, ll.Dst, ll.Src, false, false},
		{"link-local from the peer", ll, false, 0, ll.Dst, ll.Src, true, true},
		{"link-local from another MAC", ll, false, 0, addr("fe80::250:56ff:fe00:3"), ll.Src, false, false},
		{"link-local path, peer's IPv4", ll, false, 0, addr("10.0.0.1"), addr("10.0.0.2"), false, false},
		{"no path (source GID unbound)", v4, true, 0, addr("10.0.0.1"), addr("10.0.0.2"), false, false},
		{"not receiving (INIT): dropped, not counted", v4, false, transport.StateInit, addr("10.0.0.3"), addr("10.0.0.2"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.Route, h.NoPath = tt.path, tt.noPath
			if tt.state != 0 {
				h.qp.SetState(transport.StateReset)
				h.qp.SetState(tt.state)
			}
			h.PostRecv(1, 0, 64)
			before := h.Fill(0, 64, 0x55)
			payload := []byte("injected by someone who is not the peer")
			pkt := parse(t, reqPacket(roce.RCSendOnly, testRQPSN, true, payload))
			if got := h.qp.ReceiveFrom(&pkt, tt.src, tt.dst); got != tt.accepted {
				t.Errorf("ReceiveFrom = %v, want %v", got, tt.accepted)
			}
			done, sent := h.Completions(), h.Take()
			if !tt.acts {
				if len(done) != 0 || len(sent) != 0 || len(h.Events) != 0 {
					t.Fatalf("a dropped packet acted: completions %v, packets %v, events %v", done, describe(sent), h.Events)
				}
				if string(h.BytesAt(0, 64)) != string(before) {
					t.Fatal("a dropped packet wrote memory")
				}
				return
			}
			if len(done) != 1 || done[0].Status != transport.StatusSuccess || done[0].ByteLen != uint32(len(payload)) {
				t.Fatalf("completions %+v", done)
			}
			checkPackets(t, sent, []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}})
			if string(h.BytesAt(0, len(payload))) != string(payload) {
				t.Fatal("SEND data not delivered")
			}
		})
	}
}

// parse builds and parses a packet.
func parse(t *testing.T, f roce.PacketFields) roce.Packet {
	t.Helper()
	b, err := roce.Build(make([]byte, 8192), &f)
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := roce.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}
