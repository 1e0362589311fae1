package mad_test

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/ibtest"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// TestTsharkSMA: the SMA's answers to NodeInfo, PortInfo and
// NodeDescription, carried as SMPs on QP0 (VL15) in a link type 252
// capture, decode in tshark's InfiniBand dissector, a second reading of
// the attribute layouts, with the values the port state holds.
func TestTsharkSMA(t *testing.T) {
	st := mad.NewPortState(0x0002c90300001000, 0x0002c90300001001, "hcaemu mlx5_0")
	st.VendorID, st.DeviceID = 0x0002c9, 0x1013
	st.LID, st.MasterSMLID = 2, 1
	var pkts [][]byte
	for i, attr := range []uint16{mad.AttrNodeInfo, mad.AttrPortInfo, mad.AttrNodeDescription} {
		req := make([]byte, mad.Size)
		s := mad.SMP{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnLID, ClassVersion: 1,
			Method: mad.MethodGet, TID: uint64(i), AttrID: attr, AttrMod: 1}}
		_ = s.Encode(req)
		resp := make([]byte, mad.Size)
		if err := st.AnswerSMP(req, resp); err != nil {
			t.Fatal(err)
		}
		pkt, err := ib.Build(make([]byte, 512), &ib.PacketFields{
			LRH: ib.LRHFields{VL: 15, DLID: 1, SLID: 2},
			Transport: roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xFFFF},
				DETH: roce.DETHFields{}, Payload: resp}})
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, pkt)
	}
	fields := []string{"infiniband.mad.method", "infiniband.nodeinfo.nodetype", "infiniband.nodeinfo.nodeguid",
		"infiniband.nodeinfo.portguid", "infiniband.nodeinfo.partitioncap", "infiniband.nodeinfo.deviceid",
		"infiniband.nodeinfo.localportnum", "infiniband.nodeinfo.vendorid",
		"infiniband.portinfo.lid", "infiniband.portinfo.mastersmlid", "infiniband.portinfo.linkwidthactive",
		"infiniband.portinfo.portstate", "infiniband.portinfo.neighbormtu", "infiniband.portinfo.mtucap",
		"infiniband.portinfo.guidcap", "infiniband.portinfo.subnettimeout", "infiniband.nodedescription.nodestring"}
	got := ibtest.Tshark(t, pkts, ";", fields...)
	want := []string{
		"0x81;0x01;0x0002c90300001000;0x0002c90300001001;0x0080;0x1013;0x01;0x0002c9;;;;;;;;;",
		"0x81;;;;;;;;0x0002;0x0001;0x02;0x04;0x05;0x05;0x01;0x12;",
		"0x81;;;;;;;;;;;;;;;;hcaemu mlx5_0",
	}
	ibtest.Compare(t, got, want)
}
