package mlx5

import (
	"errors"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
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
	var rx subnet.Receiver = func(pkt []byte) bool {
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
	}
	if cfg.Tap != nil && cfg.Tap.Receiver != nil {
		rx = cfg.Tap.Receiver(rx)
	}
	p, err := cfg.Subnet.Attach(d.name, d.nodeGUID+1, rx)
	if err != nil {
		d.log.Error("InfiniBand port not attached: the port reports LID 0", "err", err)
		return
	}
	d.ibPort, d.ibSend = p, p.Send
	if cfg.Tap != nil && cfg.Tap.Send != nil {
		d.ibSend = cfg.Tap.Send(p.Send)
	}
	if cfg.Tap == nil {
		// Untapped (a tapped port's packets are all recorded or
		// replayed): RC packets may go to the other ports in batches.
		p.SetDirect(d.core.DirectReceiver())
		d.wire.AttachLink(&d.core, coreModel{d}, d.log, ibLink{p}, d.mem, cfg.Mem)
	}
}

// The direct path (the core's hca.Wire on subnet.Port's batches): between
// two HCAs of the subnet, while nothing watches it (no capture, no fault
// rule, no recorder, no tracer, the port not held down), an RC packet is
// not a whole IB packet: its transport part goes in a batch, no LRH, ICRC
// or VCRC, many to a hand-off; MIDDLE packets of a message go as runs, a
// run's payload lent from guest memory and copied once, by the receiver.
// The subnet vouches for the source LID (fabric.Batch.SLID); the receiving
// device checks it, and the partition, as it checks a whole packet's
// (AdmitDirect). Paths with a GRH, and every other transport, go as whole
// packets.

// ibLink is the IB port as the core's direct link.
type ibLink struct{ port *subnet.Port }

func (l ibLink) Open(p transport.Path) (*fabric.Batch, bool) {
	if p.Global || p.DLID == 0 {
		return nil, false
	}
	return l.port.Open(p.DLID)
}

func (l ibLink) Flush(b *fabric.Batch) fabric.DirectReceiver { return l.port.Flush(b) }

// FrameLen: the LRH, the transport part and the VCRC (no GRH: paths with
// one go as whole packets).
func (ibLink) FrameLen(p transport.Path, n int) int { return ib.HeaderLen(p.Global) + n + ib.VCRCSize }

// directOK reports whether an RC packet on path p may go in a batch now,
// as far as the sending device is concerned: no tracer (it traces whole
// packets), the port up, bus mastering on (a lent payload is read later).
func (d *Device) directOK(p *transport.Path) bool {
	return d.ibPort != nil && !p.Global && d.x.obs.tracer == nil && !d.portDown() && d.busOK(0, 0) == nil
}

// transmitDirect sends an RC packet in a batch when it may go so
// (sent=false: build a whole packet).
func (env *qpEnv) transmitDirect(path *transport.Path, f *roce.PacketFields, payload *transport.Payload) (bool, error) {
	d := env.d
	if !d.directOK(path) {
		return false, nil
	}
	pl := payload
	if isInline(payload) {
		// Not in memory regions the wire can gather from: the bytes.
		if cap(env.payload) < payload.Len {
			env.payload = make([]byte, payload.Len)
		}
		data := env.payload[:payload.Len]
		if err := env.gather(payload, data); err != nil {
			return true, err
		}
		pl = &transport.Payload{Len: payload.Len, Bytes: data}
	}
	sent, err := d.wire.TransmitDirect(path, f, pl, env.mem)
	if sent && err == nil {
		env.q.CountTx(f, payload.Len)
	}
	return sent, err
}

// The device as its wire's model (hca.WireModel, hca.LinkAdmitter).

func (m coreModel) Up() bool { return m.d.fn.obj.qps.Limit() != 0 }

func (m coreModel) QP(qpn uint32) *hca.QP {
	if q := m.d.qpByQPN(qpn); q != nil {
		return &q.QP
	}
	return nil
}

func (m coreModel) Alive(h *hca.QP) bool {
	o := &m.d.fn.obj
	if o.qps.Limit() == 0 {
		return false
	}
	q := o.qps.Get(h.Handle)
	return q != nil && &q.QP == h
}

// AdmitDirect is receiveFrame's check of an RC packet, for one that came
// in a batch: the default partition, a connected RC QP (not UC, not an
// XRC target: their packets come whole), from its remote LID (the DLID is
// the port's: the subnet delivered the batch by it).
func (m coreModel) AdmitDirect(h *hca.QP, pkey, slid uint16) bool {
	d := m.d
	q := d.qpByQPN(h.QPN)
	switch {
	case q == nil || &q.QP != h || pkey&0x7fff != 0x7fff:
		d.stats.RxDropped++
		return false
	case q.RC == nil || q.env == nil || q.uc != nil || q.st == ifc.QPStXRC:
		d.stats.RxDropped++
		return false
	case slid != q.env.dlid:
		d.stats.RxDropped++
		d.stats.RxAddress++
		return false
	}
	return true
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

// madIfc: MAD_IFC (spec §5.4.1). An SMP goes to the port's SMA, a
// Performance Management MAD to its PMA (ClassPortInfo only); the
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
	err := d.port.AnswerSMP(req, resp)
	if errors.Is(err, mad.ErrClass) {
		// Not an SMP: the port's PMA answers ClassPortInfo (ib_core asks
		// when it makes the port's sysfs counters).
		err = mad.AnswerPerf(req, resp)
	}
	if err != nil {
		// Not a driver mistake in itself (a tool may send any MAD to the
		// port): refused without a finding.
		d.log.Debug("MAD_IFC: no answer", "err", err, "class", req[1], "method", req[3], "attr", uint16(req[16])<<8|uint16(req[17]))
		return result{ifc.StatBadParamErr, SyndMAD}
	}
	return ok
}
