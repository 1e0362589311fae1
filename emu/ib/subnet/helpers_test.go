package subnet_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// host is a port of the tests with a bounded receive queue.
type host struct {
	*subnet.Port
	mu   sync.Mutex
	got  [][]byte
	max  int
	full bool // refuse everything (backpressure)
}

func (h *host) rx(pkt []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.full || len(h.got) >= h.max {
		fabric.Release(pkt)
		return false
	}
	h.got = append(h.got, append([]byte(nil), pkt...))
	fabric.Release(pkt)
	return true
}

// take returns and forgets what the host received.
func (h *host) take() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.got
	h.got = nil
	return g
}

func attach(t testing.TB, s *subnet.Subnet, name string, guid uint64) *host {
	t.Helper()
	h := &host{max: 1 << 16}
	p, err := s.Attach(name, guid, h.rx)
	if err != nil {
		t.Fatal(err)
	}
	h.Port = p
	return h
}

// send builds a packet from h and sends it.
func send(t testing.TB, h *host, f ib.PacketFields) bool {
	t.Helper()
	out := fabric.NewFrame()
	pkt, err := ib.Build(out, &f)
	if err != nil {
		t.Fatal(err)
	}
	return h.Send(pkt)
}

// ud is a UD SEND from h's LID to dlid, QP qpn, with a GRH to dgid when
// dgid is set.
func ud(h *host, dlid uint16, dgid *ib.GID, qpn, qkey uint32, payload []byte) ib.PacketFields {
	f := ib.PacketFields{LRH: ib.LRHFields{DLID: dlid, SLID: h.LID()}, Transport: roce.PacketFields{
		BTH:     roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xFFFF, DestQP: qpn},
		DETH:    roce.DETHFields{QKey: qkey, SrcQP: 0x48},
		Payload: payload}}
	if dgid != nil {
		f.GRH = &ib.GRHFields{SGID: h.GID(), DGID: *dgid}
	}
	return f
}

const tid = 0x0000000100000042

// saReq is an SA MAD of method and attribute with a record and a mask.
func saReq(method uint8, attr uint16, mask uint64, rec func([]byte)) []byte {
	m := mad.SAMAD{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2,
		Method: method, TID: tid, AttrID: attr}, CompMask: mask}
	if rec != nil {
		rec(m.Data[:])
	}
	b := make([]byte, mad.Size)
	_ = m.Encode(b)
	return b
}

// askSA sends body to the SA from h and returns its one answer, parsed
// and checked as the GSI QP of a device would see it.
func askSA(t testing.TB, h *host, body []byte) mad.SAMAD {
	t.Helper()
	h.take()
	send(t, h, ud(h, subnet.SMLID, nil, 1, mad.GSIQKey, body))
	got := h.take()
	if len(got) != 1 {
		t.Fatalf("%d answers from the SA, want 1", len(got))
	}
	p, err := ib.Parse(got[0])
	if err != nil {
		t.Fatalf("SA answer does not parse: %v", err)
	}
	tr := &p.Transport
	if p.LRH.SLID() != subnet.SMLID || p.LRH.DLID() != h.LID() || tr.Opcode() != roce.UDSendOnly ||
		tr.BTH.DestQP() != 0x48 || tr.DETH.QKey() != mad.GSIQKey || tr.DETH.SrcQP() != 1 || len(tr.Payload) != mad.Size {
		t.Fatalf("SA answer addressing: LRH %+v BTH %+v DETH %+v", p.LRH.Fields(), tr.BTH.Fields(), tr.DETH.Fields())
	}
	m, err := mad.DecodeSA(tr.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if m.TID != tid || !m.IsResponse() {
		t.Fatalf("SA answer TID %#x method %#x", m.TID, m.Method)
	}
	return m
}

// checkGoroutines fails when goroutines started during the test outlive
// it (the subnet runs none of its own).
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines leaked:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}
