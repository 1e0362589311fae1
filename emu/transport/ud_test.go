package transport

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
)

// newUD is a UD QP in RTS on the harness's memory (the harness's RC QP is
// unused).
func newUD(t *testing.T, gsi bool) (*harness, *UD) {
	h := newHarness(t, nil)
	ud := NewUD(h, h.mem(), nil)
	ud.Configure(UDConfig{QPN: 0x33, QKey: 0x1234, GSI: gsi})
	for _, s := range []State{StateInit, StateRTR, StateRTS} {
		ud.SetState(s)
	}
	return h, ud
}

func TestUDSend(t *testing.T) {
	tests := []struct {
		name   string
		gsi    bool
		op     Opcode
		qkey   uint32
		length int
		noPath bool
		status Status
		qkeyOn uint32 // Q_Key on the wire; 0: no packet
		events int
	}{
		{"send", false, OpSend, 0x99, 100, false, StatusSuccess, 0x99, 0},
		{"Q_Key from the QP", false, OpSend, 0x80000000, 100, false, StatusSuccess, 0x1234, 0},
		{"GSI uses the GSI Q_Key", true, OpSendImm, 0x99, 100, false, StatusSuccess, roce.GSIQKey, 0},
		{"larger than the MTU: completes unsent", false, OpSend, 0x99, UDMTU + 1, false, StatusSuccess, 0, 0},
		{"not a SEND", false, OpWrite, 0x99, 100, false, StatusLocQPOpErr, 0, 1},
		{"no path", false, OpSend, 0x99, 100, true, StatusLocQPOpErr, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ud := newUD(t, tt.gsi)
			h.noPath = tt.noPath
			data := h.fill(0, tt.length, 1)
			wr := SendWR{ID: 5, Opcode: tt.op, Signaled: true, DestQPN: 0x44, QKey: tt.qkey, Segs: h.segs(0, tt.length), Length: uint32(tt.length)}
			ud.Send(&wr)
			sent := h.take()
			if tt.qkeyOn == 0 {
				if len(sent) != 0 {
					t.Fatalf("%d packets sent", len(sent))
				}
			} else {
				if len(sent) != 1 {
					t.Fatalf("%d packets sent, want 1", len(sent))
				}
				f := sent[0].f
				if f.DETH.QKey != tt.qkeyOn || f.DETH.SrcQP != 0x33 || f.BTH.DestQP != 0x44 || f.BTH.PSN != 0 {
					t.Errorf("DETH %+v to QP %#x PSN %d", f.DETH, f.BTH.DestQP, f.BTH.PSN)
				}
				checkPayload(t, "datagram", sent[0].payload, data)
			}
			want := Completion{WRID: 5, Status: tt.status, Opcode: tt.op.Completion()}
			if tt.status == StatusSuccess {
				want.ByteLen = uint32(tt.length)
			}
			checkCompletions(t, h.completions(), []Completion{want})
			if len(h.events) != tt.events {
				t.Errorf("events %v", h.events)
			}
		})
	}
}

func TestUDReceive(t *testing.T) {
	ipv4 := make([]byte, 20)
	ipv6 := make([]byte, 40)
	for i := range ipv6 {
		ipv6[i] = byte(i + 1)
	}
	copy(ipv4, ipv6)
	tests := []struct {
		name     string
		qkey     uint32
		ip       []byte
		capacity int
		accepted bool
		done     bool
		hdrType  uint8
	}{
		{"IPv4", 0x1234, ipv4, 256, true, true, 1},
		{"IPv6", 0x1234, ipv6, 256, true, true, 2},
		{"wrong Q_Key", 0x1235, ipv4, 256, false, false, 0},
		{"does not fit", 0x1234, ipv4, GRHSize + 4, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ud := newUD(t, false)
			h.postRecv(8, 0, tt.capacity)
			f := roce.PacketFields{Payload: []byte("datagram")}
			f.BTH = roce.BTHFields{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 0x33}
			f.DETH = roce.DETHFields{QKey: tt.qkey, SrcQP: 0x55}
			b, err := roce.Build(make([]byte, 256), &f)
			if err != nil {
				t.Fatal(err)
			}
			pkt, err := roce.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if accepted := ud.Receive(&pkt, tt.ip); accepted != tt.accepted {
				t.Errorf("accepted %v, want %v", accepted, tt.accepted)
			}
			done := h.completions()
			if !tt.done {
				checkCompletions(t, done, nil)
				if len(h.recvs) != 1 {
					t.Error("receive request consumed")
				}
				return
			}
			checkCompletions(t, done, []Completion{{WRID: 8, Opcode: WCRecv, ByteLen: GRHSize + 8, Recv: true}})
			if c := done[0]; !c.GRH || c.NetworkHdrType != tt.hdrType || c.SrcQP != 0x55 {
				t.Errorf("completion %+v", c)
			}
			grh := h.bytesAt(0, GRHSize)
			if tt.hdrType == 1 {
				checkPayload(t, "GRH area", grh[20:], ipv4)
			} else {
				checkPayload(t, "GRH area", grh, ipv6)
			}
			checkPayload(t, "payload", h.bytesAt(GRHSize, 8), []byte("datagram"))
		})
	}
}
