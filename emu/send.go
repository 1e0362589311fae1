package emu

import "github.com/hcaemu/hcaemu/uverbs"

// canSend reports whether the QP's transport can take another WQE now.
// Until the fabric exists (the data-path issue), RC QPs keep their WQEs
// posted and UD/GSI datagrams leave on an empty wire.
func (d *Device) canSend(x *qp) bool {
	return x.typ == QPTypeUD || x.typ == QPTypeGSI
}

// execSend executes one send WQE.
func (d *Device) execSend(x *qp, w *uverbs.SendWQE) {
	switch w.Opcode {
	case uverbs.OpSend, uverbs.OpSendImm:
	default:
		d.completeSend(x, w, uverbs.WCLocQPOpErr, 0)
		d.qpError(x, EvQPReqErr)
		return
	}
	n, st := d.checkSGEs(x, w.SGE, false)
	if st != uverbs.WCSuccess {
		d.completeSend(x, w, st, 0)
		d.qpError(x, EvQPAccessErr)
		return
	}
	d.completeSend(x, w, uverbs.WCSuccess, n)
}
