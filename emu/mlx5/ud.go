package mlx5

import (
	"net/netip"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/ud"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Datagrams on the InfiniBand port (spec §11 Stages 3 and 4): UD QPs and
// the GSI QP (st QP1, the hardware QP mlx5_ib's GSI layer posts ib_mad's
// QP1 traffic on when set_deth_sqpn is off) run the core's UD service
// (emu/transport/ud). A send WQE's address vector (struct mlx5_wqe_av)
// names the destination LID, SL and, for a global route, the GRH; the
// datagram goes out with the QP's wire QPN (1 for the GSI QP) in its
// DETH. A datagram received is for the QP its BTH names (1: the GSI QP;
// 0xffffff: every QP attached to the multicast group its GRH's DGID
// names, ATTACH_TO_MCG), with the default P_Key and the QP's Q_Key (the
// GSI QP's is 0x80010000); its CQE carries the source LID, SL, QPN and
// the GRH flag, the GSI QP's also the P_Key. QP0 (SMPs) stays a sink: the
// subnet carries no SMPs.

// Syndromes of the multicast commands' failures.
const (
	SyndMCGFull        = syndBase | 0x0090 // every group, or every QP slot of the group, in use
	SyndMCGNotAttached = syndBase | 0x0091 // a detach of a QP not attached to the group
	SyndMCGQP          = syndBase | 0x0092 // attach/detach of a QP that is not UD
	SyndMCGGID         = syndBase | 0x0093 // a GID that is not multicast
)

// multicastQPN is the BTH destination QP of a multicast datagram.
const multicastQPN = 0xffffff

// gsiPKey is the P_Key a GSI receive completion reports (the default
// partition's, full member): mlx5_ib looks its index up.
const gsiPKey = 0xffff

// isDatagram reports a service type the UD service runs.
func isDatagram(st uint8) bool { return st == ifc.QPStUD || st == ifc.QPStQP1 }

// configureUD gives a UD or GSI QP's transport its attributes from the
// merged context: the wire QPN, the Q_Key, the largest datagram (the QP's
// MTU: the driver sets 4096 for UD, 256 for QP1).
func (d *Device) configureUD(q *qp) {
	ctx := q.ctx[:]
	cfg := ud.Config{QPN: q.QPN, QKey: ifc.QPCQKey.Get(ctx), MTU: uint32(transport.PMTU(ifc.QPCMTU.Get(ctx)))}
	if q.st == ifc.QPStQP1 {
		cfg.QPN, cfg.QKey, cfg.GSI = 1, roce.GSIQKey, true
		d.fn.gsi = q.Handle
	}
	q.UD.Configure(cfg)
	q.UD.SetState(transportState(q.state))
}

// sendUD hands the posted send WQEs of a UD or GSI QP in RTS to its
// transport, which sends and completes each at once; the SQ's depth
// bounds them.
func (env *qpEnv) sendUD() {
	q := env.q
	env.eachSend(true, q.UD.Send)
	if q.state == ifc.QPStateERR {
		env.flush()
	}
}

// takeAV fills a datagram send request's destination from its WQE's
// address vector.
func (env *qpEnv) takeAV(wr *transport.SendWR, av *uverbs.AV) {
	wr.DestQPN, wr.QKey = av.DQPN(), av.QKey
	wr.AH = transport.AddressHandle{DLID: av.RLID, SL: av.SL(), Global: av.GRH(),
		GIDIndex: av.SGIDIndex(), DGID: av.RGID, HopLimit: av.HopLimit, TrafficClass: av.TClass, FlowLabel: av.FlowLabel()}
}

// PathTo is where a datagram to ah goes: its LID (unicast or a multicast
// group's MLID) with its SL, and the GRH it asks for, from the port's one
// GID (index 0). A reserved LID, or another GID index, has no path.
func (env *qpEnv) PathTo(ah *transport.AddressHandle) (transport.Path, bool) {
	if ah.DLID == 0 || ah.DLID == 0xffff && !ah.Global || ah.Global && ah.GIDIndex != 0 {
		return transport.Path{}, false
	}
	p := transport.Path{DLID: ah.DLID, SL: ah.SL & 0xf, Global: ah.Global}
	if ah.Global {
		p.Dst = addr16(ah.DGID)
		p.HopLimit, p.TClass, p.FlowLabel = ah.HopLimit, ah.TrafficClass, ah.FlowLabel&0xfffff
	}
	return p, true
}

// receiveDatagram delivers a UD packet (lock held): to the GSI QP, to
// the UD QP it names, or, multicast, to every UD QP attached to the group
// its GRH names. It reports whether a QP took it.
func (d *Device) receiveDatagram(pkt *ib.Packet) bool {
	dest := pkt.Transport.BTH.DestQP()
	if dest != multicastQPN {
		if pkt.LRH.DLID() != d.ibPort.LID() {
			return false
		}
		var q *qp
		if dest == 1 {
			q = d.fn.obj.qps.Get(d.fn.gsi)
			if q != nil && q.st != ifc.QPStQP1 {
				q = nil
			}
		} else if q = d.qpByQPN(dest); q != nil && q.st != ifc.QPStUD {
			q = nil
		}
		return d.deliverDatagram(q, pkt)
	}
	if pkt.GRH == nil || !ib.IsMulticastLID(pkt.LRH.DLID()) {
		return false
	}
	took := false
	for qpn := range d.fn.mcgs[pkt.GRH.DGID()] { // bounded by max_qp_mcg and the QPs
		q := d.qpByQPN(qpn)
		if q == nil || q.st != ifc.QPStUD {
			continue
		}
		if ifc.QPCBlockLbMc.Get(q.ctx[:]) != 0 && pkt.LRH.SLID() == d.ibPort.LID() {
			continue // its own group's traffic, when it asked not to see it
		}
		took = d.deliverDatagram(q, pkt) || took
	}
	return took
}

// deliverDatagram hands a datagram to QP q's UD service (the Q_Key is its
// check), noting the LRH fields its CQE reports.
func (d *Device) deliverDatagram(q *qp, pkt *ib.Packet) bool {
	if q == nil || q.UD == nil || q.env == nil {
		return false
	}
	q.env.rxSLID, q.env.rxSL = pkt.LRH.SLID(), pkt.LRH.SL()
	q.CountRx(&pkt.Transport, 1, len(pkt.Transport.Payload))
	d.received(q, &pkt.Transport)
	if !q.UD.Receive(&pkt.Transport, pkt.GRH) { // nil without a GRH
		d.stats.QKeyViolations++
		return false
	}
	return true
}

// udCQE fills a datagram receive's CQE fields: the source QPN, LID and SL,
// the GRH flag, and the GSI QP's P_Key (where others get the immediate).
func (env *qpEnv) udCQE(cqe *uverbs.CQE, c *transport.Completion) {
	cqe.SrcQPN, cqe.SLID, cqe.SL = c.SrcQP&0xffffff, env.rxSLID, env.rxSL
	if c.GRH {
		cqe.GRH = uverbs.CQEGRH
	}
	if env.q.st == ifc.QPStQP1 {
		cqe.ImmInvalPkey = gsiPKey
	}
}

// addr16 is a GID as a 16-byte address (transport.Path's Src and Dst).
func addr16(g [16]byte) netip.Addr { return netip.AddrFrom16(g) }

// --- Multicast groups (ATTACH_TO_MCG, DETACH_FROM_MCG) ---------------------

// attachMCG: ATTACH_TO_MCG: UD QP qpn receives the datagrams sent to the
// group multicast_gid (a multicast GID). Attaching twice is a no-op. At
// most 1<<logMaxMCG groups and maxQPMCG QPs a group (NO_RESOURCES beyond).
func (d *Device) attachMCG(in, _ []byte) result {
	const op = ifc.OpAttachToMCG
	q, gid, r := d.mcgArgs(op, "attach_to_mcg_in", in)
	if r != ok {
		return r
	}
	if d.fn.mcgs == nil {
		d.fn.mcgs = map[ib.GID]map[uint32]struct{}{}
	}
	g := d.fn.mcgs[gid]
	if _, in := g[q.QPN]; in {
		return ok
	}
	// The limits the caps report: groups per device and QPs per group.
	logMaxMCG, maxQPMCG := capMax(ifc.CmdHCACapLogMaxMcg), capMax(ifc.CmdHCACapMaxQPMcg)
	switch {
	case g == nil && uint64(len(d.fn.mcgs)) >= 1<<logMaxMCG:
		return d.refuse(ifc.StatNoResErr, SyndMCGFull, hca.FindingCommand, op, "%d multicast groups: log_max_mcg=%d", len(d.fn.mcgs), logMaxMCG)
	case uint32(len(g)) >= maxQPMCG:
		return d.refuse(ifc.StatNoResErr, SyndMCGFull, hca.FindingCommand, op, "group %x: %d QPs, max_qp_mcg=%d", gid, len(g), maxQPMCG)
	}
	if g == nil {
		g = map[uint32]struct{}{}
		d.fn.mcgs[gid] = g
	}
	g[q.QPN] = struct{}{}
	q.mcgs++
	return ok
}

// detachMCG: DETACH_FROM_MCG: the QP leaves the group; a QP not attached
// is refused (BAD_PARAM), as the firmware does.
func (d *Device) detachMCG(in, _ []byte) result {
	const op = ifc.OpDetachFromMCG
	q, gid, r := d.mcgArgs(op, "detach_from_mcg_in", in)
	if r != ok {
		return r
	}
	g := d.fn.mcgs[gid]
	if _, in := g[q.QPN]; !in {
		return d.refuse(ifc.StatBadParamErr, SyndMCGNotAttached, hca.FindingCommand, op, "qp %#x is not attached to group %x", q.QPN, gid)
	}
	d.leaveMCG(q, gid)
	return ok
}

// leaveMCG takes QP q out of group gid (the group goes with its last QP).
func (d *Device) leaveMCG(q *qp, gid ib.GID) {
	g := d.fn.mcgs[gid]
	delete(g, q.QPN)
	q.mcgs--
	if len(g) == 0 {
		delete(d.fn.mcgs, gid)
	}
}

// detachAll takes a QP being destroyed out of every group it is in.
func (d *Device) detachAll(q *qp) {
	for gid, g := range d.fn.mcgs { // bounded by 1<<log_max_mcg
		if q.mcgs == 0 {
			return
		}
		if _, in := g[q.QPN]; in {
			d.leaveMCG(q, gid)
		}
	}
}

// mcgArgs are an attach or detach's QP (a UD QP) and group (a multicast
// GID).
func (d *Device) mcgArgs(op ifc.Opcode, st string, in []byte) (*qp, ib.GID, result) {
	q, r := d.lookupQP(op, st+".qpn", in)
	if r != ok {
		return nil, ib.GID{}, r
	}
	var gid ib.GID
	copy(gid[:], ifc.MCGInMulticastGID.Bytes(in))
	switch {
	case q.st != ifc.QPStUD:
		return nil, gid, d.refuse(ifc.StatBadParamErr, SyndMCGQP, hca.FindingCommand, op, "%s.qpn=%#x: a %s QP, multicast is UD's", st, q.QPN, stNames[uint32(q.st)])
	case !gid.IsMulticast():
		return nil, gid, d.refuse(ifc.StatBadParamErr, SyndMCGGID, hca.FindingCommand, op, "%s.multicast_gid=%x: not a multicast GID (ff..)", st, gid)
	}
	return q, gid, ok
}

// qp2err: 2ERR_QP: from any state to ERR; the QP's queues are flushed.
func (d *Device) qp2err(in, _ []byte) result {
	q, r := d.lookupQP(ifc.Op2ErrQP, "qp_2err_in.qpn", in)
	if r != ok {
		return r
	}
	q.state = ifc.QPStateERR
	d.qpTransition(q)
	if q.env != nil {
		q.env.Kick(transport.WorkSend, false)
	}
	return ok
}
