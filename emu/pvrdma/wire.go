package pvrdma

import (
	"net/netip"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The device's port is the core's (hca.Wire): framing, batches, runs and
// loans, the demux of received packets to their QP. What is PVRDMA's here:
// paths from its GID table, and the drop counters QUERY_PORT reads.

// Port is the HCA's attachment to the fabric (hca.Port).
type Port = hca.Port

// Attach connects a device to a fabric (hca.Attach).
type Attach = hca.Attach

// gidAddr is the IP address a GID stands for.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// pathFor resolves a source GID index and a destination GID into a path.
func (d *Device) pathFor(sgid uint8, dgid [16]byte) (transport.Path, bool) {
	if int(sgid) >= len(d.res.gids) || !d.res.gids[sgid].Valid {
		return transport.Path{}, false
	}
	p := transport.Path{Src: gidAddr(d.res.gids[sgid].GID), Dst: gidAddr(dgid)}
	if p.Src.Is4() != p.Dst.Is4() {
		return transport.Path{}, false
	}
	return p, true
}

// Counters are the drop counts the driver can read (QUERY_PORT), which a
// reset clears; Stats().Port has every drop by reason, over the device's life.
type Counters struct {
	// QKeyViolations: UD datagrams with the wrong Q_Key (QUERY_PORT's
	// qkey_viol_cntr).
	QKeyViolations uint32
}

// Counters returns the drop counters (since the last reset).
func (d *Device) Counters() Counters {
	d.core.Lock()
	defer d.unlock()
	return Counters{QKeyViolations: d.wire.QKeyViolations}
}

// The PVRDMA device as its wire's model (hca.WireModel).

func (m coreModel) Up() bool { return m.d.dsr != nil && m.d.active }

func (m coreModel) QP(qpn uint32) *hca.QP {
	if qp := m.d.qpByQPN(qpn); qp != nil {
		return &qp.QP
	}
	return nil
}

func (m coreModel) Alive(q *hca.QP) bool {
	qp := m.d.res.qp.get(q.Handle)
	return qp != nil && &qp.QP == q
}
