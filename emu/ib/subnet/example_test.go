package subnet_test

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// Example is what an IB device model does with the subnet: attach its
// port, report the LIDs through its SMA (MAD_IFC), send a packet (here the
// PathRecord query ib_sa would send from QP1) and take the SA's answer.
func Example() {
	sub := subnet.New(subnet.Config{})
	answers := make(chan []byte, 4)
	rx := func(pkt []byte) bool { // the device's receive queue: never blocks
		select {
		case answers <- pkt:
			return true
		default:
			fabric.Release(pkt)
			return false
		}
	}
	port, _ := sub.Attach("mlx5_0 port 1", 0x0002c90300001001, rx)
	peer, _ := sub.Attach("mlx5_1 port 1", 0x0002c90300002001, rx)

	// The SMA: what MAD_IFC answers for the driver's PortInfo query.
	st := mad.NewPortState(0x0002c90300001000, port.GUID(), "hcaemu mlx5_0")
	st.LID, st.MasterSMLID, st.GIDPrefix = port.LID(), sub.SMLID(), sub.GIDPrefix()
	req := make([]byte, mad.Size)
	smp := mad.SMP{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnLID, ClassVersion: 1,
		Method: mad.MethodGet, AttrID: mad.AttrPortInfo, AttrMod: 1}}
	_ = smp.Encode(req)
	resp := make([]byte, mad.Size)
	_ = st.AnswerSMP(req, resp)
	pi, _ := mad.DecodePortInfo(resp[mad.SMPDataOffset:])
	fmt.Printf("PortInfo: LID %d, SM LID %d, state %d\n", pi.LID, pi.MasterSMLID, pi.PortState)

	// A PathRecord query from QP1 to the SA (LID 1, QP1).
	q := mad.SAMAD{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2,
		Method: mad.MethodGet, TID: 1, AttrID: mad.AttrSAPathRecord}, CompMask: mad.PRDGID | mad.PRSGID}
	pr := mad.PathRecord{DGID: peer.GID(), SGID: port.GID()}
	_ = pr.Encode(q.Data[:])
	body := make([]byte, mad.Size)
	_ = q.Encode(body)
	pkt, _ := ib.Build(fabric.NewFrame(), &ib.PacketFields{
		LRH: ib.LRHFields{DLID: sub.SMLID(), SLID: port.LID()},
		Transport: roce.PacketFields{
			BTH:     roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xFFFF, DestQP: 1},
			DETH:    roce.DETHFields{QKey: mad.GSIQKey, SrcQP: 1},
			Payload: body}})
	port.Send(pkt)

	ans := <-answers
	p, _ := ib.Parse(ans)
	m, _ := mad.DecodeSA(p.Transport.Payload)
	path, _ := mad.DecodePathRecord(m.Data[:])
	fmt.Printf("answer from LID %d QP%d: status %#x, path DLID %d SLID %d MTU %d\n",
		p.LRH.SLID(), p.Transport.DETH.SrcQP(), m.Status, path.DLID, path.SLID, mad.MTUBytes(path.MTU))
	fabric.Release(ans)
	// Output:
	// PortInfo: LID 2, SM LID 1, state 4
	// answer from LID 1 QP1: status 0x0, path DLID 3 SLID 2 MTU 4096
}
