package verbstest

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Isolation against a hostile peer: a third party on the wire knows a
// connected RC pair's QPNs, PSNs and R_Key and sends at it, from its own
// address (the receiving device's address check drops it) or with the
// real peer's address as source (the wire drops it: the sending port does
// not own that address). The victims' data and completions must not
// change, and the drops are counted.

// RawFrame frames an RC packet from src to dst with a valid ICRC.
func RawFrame(t *testing.T, src, dst netip.Addr, f roce.PacketFields) []byte {
	t.Helper()
	ib, err := roce.Build(make([]byte, 8192), &f)
	if err != nil {
		t.Fatal(err)
	}
	ff := roce.FrameFields{SrcIP: src, DstIP: dst, HopLimit: 64, SrcPort: 0xC000}
	frame, err := roce.Frame(make([]byte, 64+len(ib)+64), &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// victims is a connected RC pair a (host 1) -> b (host 2) on net that
// has moved one message; the next message is a SEND of 300 bytes into a
// receive of b's (postSend, postRecv).
type victims struct {
	a, b           Host
	qa, qb         QP
	src, dst       uint64 // a's send buffer, b's receive buffer / WRITE target
	lkA, lkB, rkB  uint32
	nextSendPSN    uint32 // the PSN of qa's next request (b expects it)
	expectedByB    []byte // b's receive buffer and WRITE target before any attack
	recvWRID       uint64
	firstSendBytes int
	sent, received bool // the next SEND and its receive are posted
}

const victimBuf = 4096

func newVictims(t *testing.T, sw *Net, newHost NewHost) *victims {
	t.Helper()
	v := &victims{a: newHost(t, sw, 1, HostOpts{RAM: 4 << 20}), b: newHost(t, sw, 2, HostOpts{RAM: 4 << 20}), recvWRID: 20, firstSendBytes: 64}
	v.src, v.lkA, _ = region(v.a, v.a.PD(), victimBuf, All)
	v.dst, v.lkB, v.rkB = region(v.b, v.b.PD(), 2*victimBuf, All)
	v.qa, v.qb = pair(v.a, v.b, DefaultRC())
	fill(v.a.Mem(v.src, victimBuf), 1)
	v.qb.PostRecv(RecvWR{ID: 10, SGEs: []mr.SGE{{Addr: v.dst, Length: victimBuf, LKey: v.lkB}}})
	v.qa.PostSend(SendWR{ID: 1, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: v.src, Length: uint32(v.firstSendBytes), LKey: v.lkA}}})
	if wc := Poll(t, v.a, v.a, v.b); wc.Status != transport.StatusSuccess {
		t.Fatalf("first SEND: %+v", wc)
	}
	if wc := Poll(t, v.b, v.a, v.b); wc.Status != transport.StatusSuccess || wc.ID != 10 {
		t.Fatalf("first receive: %+v", wc)
	}
	v.nextSendPSN = StartPSN(v.qa.QPN()) + 1 // one packet sent
	fill(v.b.Mem(v.dst, 2*victimBuf), 0xA0)
	v.expectedByB = bytes.Clone(v.b.Mem(v.dst, 2*victimBuf))
	return v
}

// postRecv posts b's receive for the next SEND.
func (v *victims) postRecv() {
	v.qb.PostRecv(RecvWR{ID: v.recvWRID, SGEs: []mr.SGE{{Addr: v.dst, Length: victimBuf, LKey: v.lkB}}})
	v.received = true
}

// postSend posts a's next SEND (300 bytes).
func (v *victims) postSend() {
	fill(v.a.Mem(v.src, victimBuf), 7)
	v.qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: v.src, Length: 300, LKey: v.lkA}}})
	v.sent = true
}

// intact checks that nothing reached b's memory or either CQ, then that
// the pair still moves the next SEND (into the receive posted before the
// attack, if any) and a WRITE, with the right data.
func (v *victims) intact(t *testing.T, hosts ...Host) {
	t.Helper()
	NoCompletion(t, v.a, hosts...)
	NoCompletion(t, v.b, hosts...)
	if !bytes.Equal(v.b.Mem(v.dst, 2*victimBuf), v.expectedByB) {
		t.Fatal("the attack changed the victim's memory")
	}
	for _, q := range []struct {
		h  Host
		qp QP
	}{{v.a, v.qa}, {v.b, v.qb}} {
		if st := q.h.QPState(q.qp); st != transport.StateRTS {
			t.Fatalf("QP %#x state %v", q.qp.QPN(), st)
		}
	}
	if !v.received {
		v.postRecv()
	}
	if !v.sent {
		v.postSend()
	}
	if wc := Poll(t, v.a, hosts...); wc.Status != transport.StatusSuccess || wc.ID != 2 {
		t.Fatalf("SEND after the attack: %+v", wc)
	}
	if wc := Poll(t, v.b, hosts...); wc.Status != transport.StatusSuccess || wc.ID != v.recvWRID || wc.ByteLen != 300 || wc.QPN != v.qb.QPN() {
		t.Fatalf("receive after the attack: %+v", wc)
	}
	v.qa.PostSend(write(3, v.src+1000, 200, v.lkA, v.dst+victimBuf, v.rkB))
	if wc := Poll(t, v.a, hosts...); wc.Status != transport.StatusSuccess || wc.ID != 3 {
		t.Fatalf("WRITE after the attack: %+v", wc)
	}
	if !bytes.Equal(v.b.Mem(v.dst, 300), v.a.Mem(v.src, 300)) ||
		!bytes.Equal(v.b.Mem(v.dst+victimBuf, 200), v.a.Mem(v.src+1000, 200)) {
		t.Fatal("data after the attack differs")
	}
	NoCompletion(t, v.b, hosts...)
}

// testIsolationHostilePeer: a third port's SENDs, WRITEs and ACKs at a
// connected pair, from its own addresses or spoofing the peer's, change
// nothing, and each is counted where it is dropped (the receiving
// device's address check, or the wire's spoofing check: the switch's, the
// subnet's). On InfiniBand an address is a LID, and "another address" a
// global packet (a GRH with the ports' GIDs); on Ethernet an IP address,
// and another one the ports' link-local IPv6 addresses.
func testIsolationHostilePeer(t *testing.T, newHost NewHost) {
	payload := bytes.Repeat([]byte("pwned!"), 50)
	// The attacks, against b's responder (SEND, WRITE) and a's requester
	// (a forged ACK for a SEND b has not received: b has no receive posted
	// for it, so a retries on RNR until b posts one).
	sendAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{Payload: payload}
		f.BTH = roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: v.qb.QPN(), PSN: v.nextSendPSN, AckReq: true}
		return f
	}
	writeAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{Payload: payload}
		f.BTH = roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: v.qb.QPN(), PSN: v.nextSendPSN, AckReq: true}
		f.RETH = roce.RETHFields{VA: v.dst + victimBuf, RKey: v.rkB, DMALength: uint32(len(payload))}
		return f
	}
	ackAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{}
		f.BTH = roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: roce.DefaultPKey, DestQP: v.qa.QPN(), PSN: v.nextSendPSN}
		f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: 2}
		return f
	}
	// Who sends and who is addressed.
	const (
		own   = iota // the attacker's own address
		other        // its other address, to the victim's other address
		spoof        // the victim's peer's address
	)
	tests := []struct {
		name    string
		packet  func(*victims) roce.PacketFields
		from    int
		toA     bool // the victim QP is a's (a forged response)
		spoofed bool // the wire drops it (else b's or a's device does)
	}{
		{"SEND from its own address", sendAt, own, false, false},
		{"WRITE from its own address", writeAt, own, false, false},
		{"SEND to the victim's other address", sendAt, other, false, false},
		{"ACK from its own address", ackAt, own, true, false},
		{"SEND spoofing the peer", sendAt, spoof, false, true},
		{"WRITE spoofing the peer", writeAt, spoof, false, true},
		{"ACK spoofing the peer", ackAt, spoof, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			CheckGoroutines(t)
			net := NewNet()
			v := newVictims(t, net, newHost)
			ll := v.a.Caps().LinkLayer
			evil := net.attach(t, ll)
			victim, peer := v.b, v.a
			if tt.toA {
				// An outstanding SEND for the forged ACK to complete: b has
				// no receive for it (RNR, retried) until intact posts one.
				victim, peer = v.a, v.b
				v.postSend()
			} else {
				// A receive for the forged SEND to land in.
				v.postRecv()
			}
			src, dst := evil.own, victim.Addr()
			switch tt.from {
			case other:
				src, dst = evil.other, otherAddr(victim)
			case spoof:
				src = peer.Addr()
			}
			const attempts = 3
			for range attempts {
				f := tt.packet(v)
				if !evil.send(src, dst, &f) {
					t.Fatal("the attack packet does not build")
				}
			}
			v.intact(t, v.a, v.b)
			wantSpoofed, wantMismatch := uint64(0), uint64(attempts)
			if tt.spoofed {
				wantSpoofed, wantMismatch = attempts, 0
			}
			if got := net.spoofed(ll); got != wantSpoofed {
				t.Errorf("%s: %d spoofed packets, want %d", ll, got, wantSpoofed)
			}
			if st, _ := victim.Stats(); st.Port.Address != wantMismatch {
				t.Errorf("victim device: %d address mismatches, want %d", st.Port.Address, wantMismatch)
			}
		})
	}
}
