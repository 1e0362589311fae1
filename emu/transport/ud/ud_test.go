package ud

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// newUD is a UD QP in RTS on the fake Env's memory.
func newUD(t *testing.T, gsi bool) (*transporttest.Env, *QP) {
	h := transporttest.NewEnv(t)
	ud := New(h, h.Mem(), nil)
	h.QP = ud
	ud.Configure(Config{QPN: 0x33, QKey: 0x1234, GSI: gsi})
	for _, s := range []transport.State{transport.StateInit, transport.StateRTR, transport.StateRTS} {
		ud.SetState(s)
	}
	return h, ud
}

func TestUDSend(t *testing.T) {
	tests := []struct {
		name   string
		gsi    bool
		op     transport.Opcode
		qkey   uint32
		length int
		noPath bool
		status transport.Status
		qkeyOn uint32 // Q_Key on the wire; 0: no packet
		events int
	}{
		{"send", false, transport.OpSend, 0x99, 100, false, transport.StatusSuccess, 0x99, 0},
		{"Q_Key from the QP", false, transport.OpSend, 0x80000000, 100, false, transport.StatusSuccess, 0x1234, 0},
		{"GSI uses the GSI Q_Key", true, transport.OpSendImm, 0x99, 100, false, transport.StatusSuccess, roce.GSIQKey, 0},
		{"larger than the MTU: completes unsent", false, transport.OpSend, 0x99, DefaultMTU + 1, false, transport.StatusSuccess, 0, 0},
		{"not a SEND", false, transport.OpWrite, 0x99, 100, false, transport.StatusLocQPOpErr, 0, 1},
		{"no path", false, transport.OpSend, 0x99, 100, true, transport.StatusLocQPOpErr, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ud := newUD(t, tt.gsi)
			h.NoPath = tt.noPath
			data := h.Fill(0, tt.length, 1)
			wr := transport.SendWR{ID: 5, Opcode: tt.op, Signaled: true, DestQPN: 0x44, QKey: tt.qkey, Segs: h.Segs(0, tt.length), Length: uint32(tt.length)}
			ud.Send(&wr)
			sent := h.Take()
			if tt.qkeyOn == 0 {
				if len(sent) != 0 {
					t.Fatalf("%d packets sent", len(sent))
				}
			} else {
				if len(sent) != 1 {
					t.Fatalf("%d packets sent, want 1", len(sent))
				}
				f := sent[0].Fields
				if f.DETH.QKey != tt.qkeyOn || f.DETH.SrcQP != 0x33 || f.BTH.DestQP != 0x44 || f.BTH.PSN != 0 {
					t.Errorf("DETH %+v to QP %#x PSN %d", f.DETH, f.BTH.DestQP, f.BTH.PSN)
				}
				transporttest.CheckPayload(t, "datagram", sent[0].Payload, data)
			}
			want := transport.Completion{WRID: 5, Status: tt.status, Opcode: tt.op.Completion()}
			if tt.status == transport.StatusSuccess {
				want.ByteLen = uint32(tt.length)
			}
			transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{want})
			if len(h.Events) != tt.events {
				t.Errorf("events %v", h.Events)
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
		{"IB without GRH", 0x1234, nil, 256, true, true, 0},
		{"wrong Q_Key", 0x1235, ipv4, 256, false, false, 0},
		{"does not fit", 0x1234, ipv4, GRHSize + 4, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ud := newUD(t, false)
			h.PostRecv(8, 0, tt.capacity)
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
			done := h.Completions()
			if !tt.done {
				transporttest.CheckCompletions(t, done, nil)
				if len(h.Recvs) != 1 {
					t.Error("receive request consumed")
				}
				return
			}
			transporttest.CheckCompletions(t, done, []transport.Completion{{WRID: 8, Opcode: transport.WCRecv, ByteLen: GRHSize + 8, Recv: true}})
			if c := done[0]; c.GRH != (tt.hdrType != 0) || c.NetworkHdrType != tt.hdrType || c.SrcQP != 0x55 {
				t.Errorf("completion %+v", c)
			}
			grh := h.BytesAt(0, GRHSize)
			switch tt.hdrType {
			case 0: // the area is left as the receive buffer had it
				transporttest.CheckPayload(t, "GRH area", grh, make([]byte, GRHSize))
			case 1:
				transporttest.CheckPayload(t, "GRH area", grh[20:], ipv4)
			default:
				transporttest.CheckPayload(t, "GRH area", grh, ipv6)
			}
			transporttest.CheckPayload(t, "payload", h.BytesAt(GRHSize, 8), []byte("datagram"))
		})
	}
}
