package rc

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// TestResponderFault: each injected responder decision sends exactly the
// syndrome it names for the packet's PSN (or nothing), executes or not as
// it says, and raises the event of the responder's own error of that kind.
func TestResponderFault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   ResponderFault
		want    []wantPacket
		event   []transport.Event
		written bool // the WRITE's data reached memory
		nextPSN uint32
	}{
		{"none", ResponderFault{}, []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}}, nil, true, testRQPSN + 1},
		{"psn sequence error", ResponderFault{Kind: FaultNAK, NAK: roce.NAKPSNSequenceError},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKPSNSequenceError), msn: 0}}, nil, false, testRQPSN},
		{"invalid request", ResponderFault{Kind: FaultNAK, NAK: roce.NAKInvalidRequest},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKInvalidRequest), msn: 0}}, []transport.Event{transport.EventQPRequestErr}, false, testRQPSN},
		{"remote access error", ResponderFault{Kind: FaultNAK, NAK: roce.NAKRemoteAccessError},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKRemoteAccessError), msn: 0}}, []transport.Event{transport.EventQPAccessError}, false, testRQPSN},
		{"remote operational error", ResponderFault{Kind: FaultNAK, NAK: roce.NAKRemoteOperationalErr},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.NAKSyndrome(roce.NAKRemoteOperationalErr), msn: 0}}, []transport.Event{transport.EventQPFatal}, false, testRQPSN},
		{"rnr nak", ResponderFault{Kind: FaultRNRNAK, RNRTimer: 14},
			[]wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: roce.RNRNAKSyndrome(14), msn: 0}}, nil, false, testRQPSN},
		{"suppress ack", ResponderFault{Kind: FaultSuppressACK}, nil, nil, true, testRQPSN + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			h := newHarness(t, func(c *Config) {
				c.Responder = func(pkt roce.Packet) ResponderFault {
					asked++
					if pkt.BTH.PSN() != testRQPSN || pkt.Opcode() != roce.RCRDMAWriteOnly || len(pkt.Payload) != 64 {
						t.Errorf("asked about %v PSN %d size %d", pkt.Opcode(), pkt.BTH.PSN(), len(pkt.Payload))
					}
					return tc.fault
				}
			})
			data := make([]byte, 64)
			for i := range data {
				data[i] = byte(i + 1)
			}
			f := reqPacket(roce.RCRDMAWriteOnly, testRQPSN, true, data)
			f.RETH = roce.RETHFields{VA: testVA + 512, RKey: testKey, DMALength: 64}
			h.receive(f)
			checkPackets(t, h.Take(), tc.want)
			if asked != 1 {
				t.Errorf("asked %d times, want 1", asked)
			}
			if len(h.Events) != len(tc.event) || (len(tc.event) == 1 && h.Events[0] != tc.event[0]) {
				t.Errorf("events %v, want %v", h.Events, tc.event)
			}
			if got := h.BytesAt(512, 64)[0] == 1; got != tc.written {
				t.Errorf("data written %v, want %v", got, tc.written)
			}
			if h.qp.ePSN != tc.nextPSN {
				t.Errorf("expected PSN %d, want %d", h.qp.ePSN, tc.nextPSN)
			}
			if tc.fault.Kind == FaultSuppressACK {
				// The resent packet is a duplicate: ACKed without asking.
				h.receive(f)
				checkPackets(t, h.Take(), []wantPacket{{op: roce.RCAcknowledge, psn: testRQPSN, syn: ackOK, msn: 1}})
				if asked != 1 {
					t.Errorf("asked %d times about a duplicate", asked)
				}
			}
		})
	}
}
