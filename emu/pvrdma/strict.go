package pvrdma

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Strict mode: the device as a checker of its driver. Wherever the device
// refuses or tolerates something the driver did (a command field out of
// range, a handle it never handed out, a ring index beyond the ring, a WQE
// the driver should never have posted), it records a finding: one line that
// names the object, the structure and field as pvrdma_dev_api.h and
// pvrdma_verbs.h name them, the value and what was allowed, and what the
// driver got back. A finding never changes what the device answers; only
// StrictFail adds to it.

// find records a finding (d.mu held). outcome says what the driver got
// ("CREATE_CQ failed: ERR=22 EINVAL"; "completed with LOC_LEN_ERR").
func (d *Device) find(kind hca.FindingKind, outcome, format string, args ...any) {
	f := hca.Finding{Device: d.name, Kind: kind, Text: fmt.Sprintf(format, args...) + ": " + outcome}
	d.strict.Record(d.log, f, func() {
		if !d.core.Fatal {
			d.core.Fatal = true
			d.event(hca.EventDeviceFatal, 0)
		}
	})
}

// reportf records a finding from outside the device lock.
func (d *Device) reportf(kind hca.FindingKind, outcome, format string, args ...any) {
	d.core.Lock()
	defer d.unlock()
	d.find(kind, outcome, format, args...)
}

// Findings returns how many findings of each kind the device recorded
// since it was created (resets do not clear them: they count the driver's
// mistakes over the whole run).
func (d *Device) Findings() [hca.NumFindingKinds]uint64 { return d.strict.Counts() }

// errOrRange says why an index was refused: its read failed, or it is
// beyond the ring.
func errOrRange(err error) string {
	if err != nil {
		return err.Error()
	}
	return "beyond the ring"
}

// findSendWQE reports a send WQE that does not decode: more SGEs than the
// QP was created with.
func (d *Device) findSendWQE(qp *qp, slot uint32, w *uverbs.SendWQE) {
	d.find(hca.FindingWQE, "completed with LOC_LEN_ERR", "qp %d sq[%d] pvrdma_sq_wqe_hdr.num_sge=%d > max_send_sge=%d", qp.Handle, slot, w.NumSGE, qp.sq.maxSGE)
}

// checkSendOpcode reports a send WQE whose opcode is not a PVRDMA_WR
// opcode, or one the QP's type cannot carry (the transport completes it
// with LOC_QP_OP_ERR).
func (d *Device) checkSendOpcode(qp *qp, slot uint32, raw uint32, op transport.Opcode) {
	switch {
	case op == transport.OpUnsupported:
		d.find(hca.FindingWQE, "completed with LOC_QP_OP_ERR", "qp %d sq[%d] pvrdma_sq_wqe_hdr.opcode=%d: not a PVRDMA_WR opcode", qp.Handle, slot, raw)
	case (qp.typ == abi.QPTypeUD || qp.typ == abi.QPTypeGSI) && op != transport.OpSend && op != transport.OpSendImm:
		d.find(hca.FindingWQE, "completed with LOC_QP_OP_ERR", "qp %d sq[%d] pvrdma_sq_wqe_hdr.opcode=%d (%s) on a %s QP: only SEND and SEND_WITH_IMM", qp.Handle, slot, raw, wrOpcodeNames[raw], qpTypeName(qp.typ))
	}
}

// wrOpcodeNames are the pvrdma_wr_opcode names (PVRDMA_WR_...) the
// device knows.
var wrOpcodeNames = map[uint32]string{
	uverbs.OpRDMAWrite: "RDMA_WRITE", uverbs.OpRDMAWriteImm: "RDMA_WRITE_WITH_IMM", uverbs.OpSend: "SEND",
	uverbs.OpSendImm: "SEND_WITH_IMM", uverbs.OpRDMARead: "RDMA_READ", uverbs.OpAtomicCmpSwp: "ATOMIC_CMP_AND_SWP",
	uverbs.OpAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", uverbs.OpLSO: "LSO", uverbs.OpSendInv: "SEND_WITH_INV",
	uverbs.OpRDMAReadInv: "RDMA_READ_WITH_INV", uverbs.OpLocalInv: "LOCAL_INV", uverbs.OpFastRegMR: "FAST_REG_MR",
	uverbs.OpMaskedCmpSwp: "MASKED_ATOMIC_CMP_AND_SWP", uverbs.OpMaskedFetchAdd: "MASKED_ATOMIC_FETCH_AND_ADD",
	uverbs.OpBindMW: "BIND_MW",
}

// findDoorbell reports a doorbell for an object that does not exist, or
// through a UAR page that is not its context's.
func (d *Device) findDoorbell(what string, handle, page uint32, missing bool) {
	if missing {
		d.find(hca.FindingDoorbell, "ignored", "UAR page %d: %s doorbell for handle %d: no such %s", page, what, handle, what)
		return
	}
	d.find(hca.FindingDoorbell, "ignored", "UAR page %d: %s doorbell for handle %d, which belongs to another context's UAR", page, what, handle)
}
