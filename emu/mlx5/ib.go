package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// The InfiniBand port (spec §5.4): the device is attached to an IB subnet
// (Config.Subnet), whose SM gave the port its LID; the port's SMA answers
// the SMPs the driver sends through MAD_IFC from the port's state.

// Syndromes of MAD_IFC's failures.
const (
	SyndMADPort = syndBase | 0x0080 // mad_ifc_in.port not the device's one port
	SyndMAD     = syndBase | 0x0081 // a MAD the SMA does not answer (not an SMP, a response, a trap)
)

// defaultNodeGUID is the node GUID the device reports when
// Config.NodeGUID is zero: Mellanox's OUI (00:02:c9) and a fixed tail.
const defaultNodeGUID = 0x0002c90300000001

// attach joins the port to the subnet of cfg (if any): its SM assigns the
// LID. Packets arriving for the port are queued to the core's engine
// (Core.Receive), which hands them to the device under its lock
// (receiveFrame); a full queue refuses them (the sender retries) and
// counts them in rxDropped, which Stats reports as RxQueueFull.
func (d *Device) attach(cfg Config) {
	if cfg.Subnet == nil {
		return
	}
	p, err := cfg.Subnet.Attach(d.name, d.nodeGUID+1, func(pkt []byte) bool {
		if d.portDown() {
			// A port held down by a fault: the packet is lost.
			d.x.port.lost.Add(1)
			fabric.Release(pkt)
			return true
		}
		if !d.core.Receive(pkt) {
			d.rxDropped.Add(1)
			return false
		}
		return true
	})
	if err != nil {
		d.log.Error("InfiniBand port not attached: the port reports LID 0", "err", err)
		return
	}
	d.ibPort = p
}

// newPortState is the port's SMA state at power-on: node and port GUIDs,
// the LID the subnet assigned (0 while not attached), the SM's LID, the
// node description until the driver writes NODE_DESC.
func (d *Device) newPortState() mad.PortState {
	st := mad.NewPortState(d.nodeGUID, d.nodeGUID+1, "hcaemu "+d.name)
	st.VendorID, st.DeviceID, st.Revision = IEEEVendorID, DeviceConnectX4, 0
	if d.ibPort != nil {
		st.LID, st.MasterSMLID = d.ibPort.LID(), d.ibPort.Subnet().SMLID()
		st.GIDPrefix = d.ibPort.Subnet().GIDPrefix()
	}
	return st
}

// madIfc: MAD_IFC (spec §5.4.1). The MAD goes to the port's SMA; the
// driver's registers feed it: the capability bits ib_core set through
// PCAP and the description it wrote through NODE_DESC. M_Key and B_Key
// are not checked (the port has none), so op_mod's ignore bits change
// nothing.
func (d *Device) madIfc(in, out []byte) result {
	if p := ifc.MadIfcInPort.Get(in); p != 1 {
		return d.refuse(ifc.StatBadParamErr, SyndMADPort, hca.FindingCommand, ifc.OpMADIfc, "mad_ifc_in.port=%d: one port (1)", p)
	}
	d.port.SetCapabilityMask(d.fn.pcap)
	if d.fn.nodeDesc != ([ifc.NodeDescRegSize]byte{}) {
		d.port.NodeDescription = mad.NodeDescription(d.fn.nodeDesc)
	}
	req := in[ifc.MadIfcMADOff : ifc.MadIfcMADOff+ifc.MadIfcMADSize]
	resp := out[ifc.MadIfcMADOff : ifc.MadIfcMADOff+ifc.MadIfcMADSize]
	if err := d.port.AnswerSMP(req, resp); err != nil {
		// Not a driver mistake in itself (a tool may send any MAD to the
		// port): refused without a finding.
		d.log.Debug("MAD_IFC: no answer", "err", err, "class", req[1], "method", req[3], "attr", uint16(req[16])<<8|uint16(req[17]))
		return result{ifc.StatBadParamErr, SyndMAD}
	}
	return ok
}
