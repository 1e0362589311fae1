package rc

import (
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// FuzzRC plays a hostile peer against one RC QP with no device: arbitrary
// transport packets (2-byte length prefix each) for a QP that has requests
// outstanding (a SEND, a READ, an atomic) and receives posted; a byte
// 0xFF as a length fires the timer instead. The transport must never
// panic, keep its response queue bounded, and complete each request at
// most once.
func FuzzRC(f *testing.F) {
	seed := func(fields ...roce.PacketFields) []byte { return transporttest.Seed(f, fields...) }
	f.Add(seed(reqPacket(roce.RCSendOnly, testRQPSN, true, make([]byte, 100))))
	f.Add(seed(ack(testSQPSN, ackOK, 1), ack(testSQPSN+1, roce.NAKSyndrome(roce.NAKPSNSequenceError), 1)))
	f.Add(seed(ack(testSQPSN, roce.RNRNAKSyndrome(3), 0)))
	read := reqPacket(roce.RCRDMAReadRequest, testRQPSN, true, nil)
	read.RETH = roce.RETHFields{VA: testVA, RKey: testKey, DMALength: 3000}
	f.Add(seed(read, read))
	atomic := reqPacket(roce.RCFetchAdd, testRQPSN, true, nil)
	atomic.AtomicETH = roce.AtomicETHFields{VA: testVA, RKey: testKey, SwapAdd: 1}
	f.Add(seed(atomic, atomic))
	resp := reqPacket(roce.RCRDMAReadResponseFirst, testSQPSN+1, false, make([]byte, testPMTU))
	resp.AETH = roce.AETHFields{Syndrome: ackOK}
	f.Add(seed(ack(testSQPSN, ackOK, 1), resp))
	f.Fuzz(func(t *testing.T, in []byte) {
		h := newHarness(t, nil)
		for i := 0; i < 4; i++ {
			h.PostRecv(uint64(100+i), 0, 4096)
		}
		h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true}, 0, 100)
		h.post(transport.SendWR{ID: 2, Opcode: transport.OpRead, Signaled: true, RemoteAddr: 0x1000, RKey: 9}, 4096, 2*testPMTU+1)
		h.post(transport.SendWR{ID: 3, Opcode: transport.OpCompSwap, Signaled: true, RemoteAddr: 0x2000, RKey: 9}, 8192, 8)
		for n := 0; len(in) >= 2 && n < 64; n++ {
			l := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			if l>>8 == 0xFF {
				if h.Timer != 0 {
					h.fire()
				}
				continue
			}
			l = min(l, len(in))
			b := append([]byte(nil), in[:l]...)
			in = in[l:]
			pkt, err := roce.Parse(b)
			if err != nil {
				continue
			}
			h.qp.Receive(&pkt)
			if len(h.qp.out) > maxQueuedResponses {
				t.Fatalf("%d responses queued", len(h.qp.out))
			}
			for len(h.Kicks) > 0 { // the device's engine coming back
				work := h.Kicks[0]
				h.Kicks = h.Kicks[1:]
				if work == transport.WorkRespond {
					h.qp.FlushResponses()
				} else {
					h.qp.Pump()
				}
			}
		}
		seen := map[uint64]bool{}
		for _, c := range h.Done {
			if !c.Recv && seen[c.WRID] {
				t.Fatalf("request %d completed twice: %+v", c.WRID, h.Done)
			}
			seen[c.WRID] = !c.Recv
		}
	})
}
