package mlx5

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// udRecvSlots are the receive requests posted to each QP FuzzUDReceive
// aims at: 512-byte buffers 1 KiB apart from byte udRecvBase of the QP's
// buffers.
const (
	udRecvSlots = 4
	udRecvBase  = 4096
	udRecvLen   = 512
)

// FuzzUDReceive sends a hostile port's datagrams (the fuzzer picks each
// one's opcode, destination QP, LIDs, Q_Key, P_Key, GRH and payload) to a
// device with a UD QP attached to the IPoIB broadcast group and the GSI
// QP, each with receives posted. Oracle: every CQE is a receive of one of
// the datagrams the QP may take (a UD opcode with the default P_Key, its
// Q_Key, to its QPN at the port's LID, or to the multicast QPN of its
// group by the group's MLID and MGID), in the order sent, with the
// payload in the buffer after the 40-byte GRH area and the sender's LID
// and QPN; no more CQEs than such datagrams or receives; and not a byte of
// the QPs' buffers outside the posted receive buffers changed.
func FuzzUDReceive(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 0, 0, 0, 8, 'u', 'n', 'i', 'c', 'a', 's', 't', '!'},
		{0, 2, 0, 1, 0, 5, 'm', 'c', 'a', 's', 't'},
		{1, 1, 1, 0, 0, 4, 'g', 's', 'i', '!'},
		{0, 0, 2, 0, 0, 3, 'q', 'k', 'y', 0, 0, 0, 2, 0, 3, 'p', 'k', 'y'},
		{2, 0, 0, 0, 0, 2, 'r', 'c', 0, 3, 0, 0, 0, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		sub, _, b := udPair(t)
		gsi := addEnd(t, b.d, b.drv, b.ib, ifc.QPStQP1)
		gsi.udReady(t, mad.GSIQKey)
		mgid := subnet.BroadcastMGID
		mlid, _, _ := sub.Group(mgid)
		joinSA(t, b, mgid)
		if err := b.drv.AttachMCG(b.wq.Q, mgid, false); err != nil {
			t.Fatal(err)
		}
		ends := []*rcEnd{b, gsi}
		for _, e := range ends {
			fill := bytes.Repeat([]byte{0xa5}, 64<<10)
			copy(e.mem(0, len(fill)), fill)
			for k := range udRecvSlots {
				e.drv.PostRecv(e.wq, e.seg(udRecvBase+uint64(k)<<10, udRecvLen))
			}
		}
		host, err := sub.Attach("attacker", 0x0002c903000000ee, func(p []byte) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		defer host.Detach()

		// allowed[i] are the payloads end i may take, in order.
		var allowed [2][][]byte
		for n := 0; len(prog) >= 6 && n < 64; n++ {
			op, dest, keys, route, pkeySel, size := prog[0], prog[1], prog[2], prog[3], prog[4], int(prog[5])%600
			prog = prog[6:]
			payload := prog[:min(size, len(prog))]
			prog = prog[len(payload):]
			f := ib.PacketFields{LRH: ib.LRHFields{SLID: host.LID(), DLID: b.lid}, Transport: roce.PacketFields{Payload: payload}}
			tr := &f.Transport
			tr.BTH.Opcode = []roce.Opcode{roce.UDSendOnly, roce.UDSendOnlyWithImmediate, roce.RCSendOnly}[op%3]
			if tr.BTH.Opcode == roce.UDSendOnlyWithImmediate {
				tr.ImmDt = uint32(n)
			}
			tr.BTH.PKey = []uint16{0xffff, 0x7fff, 0x8001, 0x1234}[pkeySel%4]
			tr.BTH.DestQP = []uint32{b.wq.Q.QPN, 1, multicastQPN, gsi.wq.Q.QPN, uint32(dest) << 16}[dest%5]
			tr.DETH = roce.DETHFields{QKey: []uint32{testQKey, mad.GSIQKey, testQKey ^ 1, 0}[keys%4], SrcQP: 0x4200 + uint32(n)}
			switch route % 4 {
			case 1: // to the group, with its MGID
				f.LRH.DLID = mlid
				f.GRH = &ib.GRHFields{SGID: host.GID(), DGID: mgid, HopLmt: 1}
			case 2: // to the group's MLID, another MGID
				f.LRH.DLID = mlid
				f.GRH = &ib.GRHFields{SGID: host.GID(), DGID: ib.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: byte(n)}, HopLmt: 1}
			case 3: // unicast with a GRH
				f.GRH = &ib.GRHFields{SGID: host.GID(), DGID: b.d.ibPort.GID(), HopLmt: 1}
			}
			pkt, err := ib.Build(make([]byte, 8192), &f)
			if err != nil {
				continue
			}
			host.Send(pkt)

			ud := tr.BTH.Opcode != roce.RCSendOnly && tr.BTH.PKey&0x7fff == 0x7fff && 40+len(payload) <= udRecvLen
			switch {
			case ud && tr.DETH.QKey == testQKey && (tr.BTH.DestQP == b.wq.Q.QPN && route%4 != 1 && route%4 != 2 ||
				tr.BTH.DestQP == multicastQPN && route%4 == 1):
				allowed[0] = append(allowed[0], payload)
			case ud && tr.DETH.QKey == mad.GSIQKey && tr.BTH.DestQP == 1 && route%4 != 1 && route%4 != 2:
				allowed[1] = append(allowed[1], payload)
			}
		}
		b.d.Sync()

		// Each end's CQ holds its QP's completions.
		for i, e := range ends {
			got, next := 0, 0
			for {
				c, ok := e.pollOnce()
				if !ok {
					break
				}
				cqe := uverbs.DecodeCQE(c)
				if op := c[uverbs.OpOwnOffset] >> 4; cqe.QPN != e.wq.Q.QPN || (op != uverbs.CQERespSend && op != uverbs.CQERespSendImm) {
					t.Fatalf("end %d: CQE %+v (opcode %#x): not a receive of its QP", i, cqe, op)
				}
				if got >= udRecvSlots || cqe.ByteCnt < 40 || cqe.ByteCnt > udRecvLen {
					t.Fatalf("end %d: CQE %d %+v: more CQEs than receives, or a byte count no buffer holds", i, got, cqe)
				}
				data := e.mem(udRecvBase+uint64(got)<<10+40, int(cqe.ByteCnt)-40)
				for next < len(allowed[i]) && !bytes.Equal(allowed[i][next], data) {
					next++
				}
				if next == len(allowed[i]) || cqe.SLID != host.LID() {
					t.Fatalf("end %d CQE %+v: payload %q is no datagram it may take (allowed %q)", i, cqe, data, allowed[i])
				}
				next++
				got++
			}
		}
		// Nothing outside the posted buffers changed.
		for i, e := range ends {
			mem := e.mem(0, 64<<10)
			for off := 0; off < len(mem); off++ {
				in := off >= udRecvBase && off < udRecvBase+udRecvSlots<<10 && (off-udRecvBase)%1024 < udRecvLen
				if !in && mem[off] != 0xa5 && off >= 4096 { // [0, 4096) is the send side's
					t.Fatalf("end %d: byte %#x of its buffers written outside a posted receive", i, off)
				}
			}
		}
	})
}
