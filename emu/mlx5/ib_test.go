package mlx5

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// madIfcIn is a MAD_IFC input carrying an LID-routed SMP Get of attr.
func madIfcIn(port uint8, attr uint16, mod uint32) []byte {
	in := mboxIn(ifc.OpMADIfc, ifc.MadIfcIgnoreMKey|ifc.MadIfcIgnoreBKey, ifc.MadIfcInSize)
	ifc.MadIfcInPort.Set(in, uint32(port))
	s := mad.SMP{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnLID, ClassVersion: 1,
		Method: mad.MethodGet, TID: 0x77, AttrID: attr, AttrMod: mod}}
	if err := s.Encode(in[ifc.MadIfcMADOff:]); err != nil {
		panic(err)
	}
	return in
}

// TestMADIfc: the port's SMA through MAD_IFC as mlx5_ib reads it at probe
// (spec §5.4.1): NodeInfo with Mellanox's vendor ID and the ConnectX-4's
// device ID, PortInfo ACTIVE with the LID the subnet's SM assigned and
// the SM's LID, the capability bits ib_core set through PCAP, the
// description it wrote through NODE_DESC; a second device on the subnet
// has another LID; a MAD for another port is BAD_PARAM, one the SMA does
// not answer (a response) BAD_PARAM without a finding; Close frees the
// LID.
func TestMADIfc(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	d, drv := newDevice(t, Config{Name: "hca0", Subnet: sub, NodeGUID: 0x0002c90300000100}, probeRAM)
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	d2, drv2 := newDevice(t, Config{Name: "hca1", Subnet: sub, NodeGUID: 0x0002c90300000200}, probeRAM)
	if err := drv2.Probe(); err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	get := func(drv interface {
		Exec([]byte, uint32) ([]byte, error)
	}, attr uint16, mod uint32) []byte {
		t.Helper()
		out, err := drv.Exec(madIfcIn(1, attr, mod), ifc.MadIfcOutSize)
		if err != nil {
			t.Fatalf("MAD_IFC attr %#x: %v", attr, err)
		}
		s, err := mad.DecodeSMP(out[ifc.MadIfcMADOff:])
		if err != nil || s.Method != mad.MethodGetResp || s.TID != 0x77 || s.Status != 0 {
			t.Fatalf("MAD_IFC attr %#x: %+v %v", attr, s.Header, err)
		}
		return s.Data[:]
	}
	ni, err := mad.DecodeNodeInfo(get(drv, mad.AttrNodeInfo, 0))
	if err != nil || ni.NodeGUID != 0x0002c90300000100 || ni.PortGUID != 0x0002c90300000101 ||
		ni.VendorID != IEEEVendorID || ni.DeviceID != DeviceConnectX4 || ni.NodeType != mad.NodeTypeCA || ni.PartitionCap == 0 {
		t.Errorf("NodeInfo %+v %v", ni, err)
	}
	lid := func(drv interface {
		Exec([]byte, uint32) ([]byte, error)
	}) (uint16, uint16, uint8) {
		pi := get(drv, mad.AttrPortInfo, 1)
		return be.Uint16(pi[16:]), be.Uint16(pi[18:]), pi[32] & 0xf
	}
	l1, sm, state := lid(drv)
	l2, _, _ := lid(drv2)
	if l1 < 2 || l2 < 2 || l1 == l2 || sm != sub.SMLID() || state != mad.PortStateActive {
		t.Errorf("PortInfo: LIDs %d and %d, SM LID %d (want %d), state %d", l1, l2, sm, sub.SMLID(), state)
	}

	// The registers ib_core writes show in the SMA's answers.
	pcap := make([]byte, ifc.PCAPRegSize)
	ifc.PCAPRegLocalPort.Set(pcap, 1)
	ifc.PCAPRegPortCapabilityMask.Set(pcap, mad.CapIsCommManagementSupported)
	if _, err := drv.AccessReg(ifc.RegPCAP, 0, pcap, true); err != nil {
		t.Fatal(err)
	}
	desc := make([]byte, ifc.NodeDescRegSize)
	copy(desc, "guest0 mlx5_0")
	if _, err := drv.AccessReg(ifc.RegNodeDesc, 0, desc, true); err != nil {
		t.Fatal(err)
	}
	if pi := get(drv, mad.AttrPortInfo, 1); be.Uint32(pi[20:])&mad.CapIsCommManagementSupported == 0 {
		t.Errorf("PortInfo.CapabilityMask %#x lacks IsCM after PCAP", be.Uint32(pi[20:]))
	}
	if nd := get(drv, mad.AttrNodeDescription, 0); !bytes.HasPrefix(nd, []byte("guest0 mlx5_0\x00")) {
		t.Errorf("NodeDescription %q", nd[:16])
	}

	// Refusals.
	if _, err := drv.Exec(madIfcIn(2, mad.AttrNodeInfo, 0), ifc.MadIfcOutSize); !isStatus(err, ifc.StatBadParamErr) {
		t.Errorf("MAD_IFC to port 2: %v", err)
	}
	if f := d.Findings(); f[hca.FindingCommand] != 1 {
		t.Errorf("findings %v, want one command finding (the port)", f)
	}
	resp := madIfcIn(1, mad.AttrNodeInfo, 0)
	resp[ifc.MadIfcMADOff+3] = mad.MethodGetResp
	if _, err := drv.Exec(resp, ifc.MadIfcOutSize); !isStatus(err, ifc.StatBadParamErr) {
		t.Errorf("MAD_IFC of a response: %v", err)
	}
	if f := d.Findings(); f[hca.FindingCommand] != 1 {
		t.Errorf("findings %v after a MAD the SMA does not answer", f)
	}

	// A Performance Management ClassPortInfo Get (ib_core's, as it makes
	// the port's sysfs counters) is the PMA's: no optional counters.
	pma := mboxIn(ifc.OpMADIfc, ifc.MadIfcIgnoreMKey|ifc.MadIfcIgnoreBKey, ifc.MadIfcInSize)
	ifc.MadIfcInPort.Set(pma, 1)
	h := mad.Header{BaseVersion: 1, MgmtClass: mad.ClassPerf, ClassVersion: mad.PerfClassVersion, Method: mad.MethodGet, TID: 7, AttrID: mad.AttrClassPortInfo}
	if err := h.Encode(pma[ifc.MadIfcMADOff:]); err != nil {
		t.Fatal(err)
	}
	out, err := drv.Exec(pma, ifc.MadIfcOutSize)
	if err != nil {
		t.Fatalf("PerfMgt ClassPortInfo: %v", err)
	}
	rh, _ := mad.DecodeHeader(out[ifc.MadIfcMADOff:])
	cpi, _ := mad.DecodeClassPortInfo(out[ifc.MadIfcMADOff+mad.PerfDataOffset:])
	if rh.Method != mad.MethodGetResp || rh.Status != mad.StatusOK || rh.TID != 7 || cpi.BaseVersion != 1 || cpi.ClassVersion != 1 || cpi.CapabilityMask != 0 {
		t.Errorf("PerfMgt answer %+v, ClassPortInfo %+v", rh, cpi)
	}

	// Close frees the LID: the subnet has the SM's port and hca0's.
	d2.Close()
	if ports := sub.Ports(); len(ports) != 2 {
		t.Errorf("after hca1 closed, the subnet's ports: %v", ports)
	}
}
