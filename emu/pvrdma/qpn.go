package pvrdma

import "github.com/hcaemu/hcaemu/emu/hca"

// QP numbers carry random high bits above the handle (hca.QPNs says why).

// qpnHandleBits is how many low bits of a QPN hold the handle: enough for
// every handle of the QP table.
func (r *resources) qpnHandleBits() uint { return hca.HandleBits(r.qp.Limit()) }

// newQPN is the QPN of the QP with handle h (called under the device lock).
func (d *Device) newQPN(h uint32) uint32 { return d.qpns.QPN(h, d.res.qpnHandleBits()) }

// qpByQPN finds the QP a packet names by its QPN (nil: none).
func (d *Device) qpByQPN(qpn uint32) *qp {
	qp := d.res.qp.get(hca.Handle(qpn, d.res.qpnHandleBits()))
	if qp == nil || qp.QPN != qpn {
		return nil
	}
	return qp
}
