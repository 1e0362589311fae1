package emu

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/transport"
)

// The PVRDMA mappings, value by value, the expected numbers written from the
// headers (pvrdma_verbs.h, ib_verbs.h), not from the tables they check.

func TestTransportState(t *testing.T) {
	for _, tc := range []struct {
		pvrdma uint8 // enum pvrdma_qp_state
		want   transport.State
	}{
		{0, transport.StateReset}, {1, transport.StateInit}, {2, transport.StateRTR}, {3, transport.StateRTS},
		{4, transport.StateSQD}, {5, transport.StateSQE}, {6, transport.StateErr},
		{7, transport.StateErr}, {255, transport.StateErr}, // not a state the device keeps
	} {
		if got := transportState(tc.pvrdma); got != tc.want {
			t.Errorf("transportState(%d) = %d, want %d", tc.pvrdma, got, tc.want)
		}
	}
}

func TestWCStatus(t *testing.T) {
	for _, tc := range []struct {
		status transport.Status
		want   uint32 // enum pvrdma_wc_status
	}{
		{transport.StatusSuccess, 0}, {transport.StatusLocLenErr, 1}, {transport.StatusLocQPOpErr, 2},
		{transport.StatusLocProtErr, 4}, {transport.StatusWRFlushErr, 5}, {transport.StatusBadRespErr, 7},
		{transport.StatusRemInvReq, 9}, {transport.StatusRemAccess, 10}, {transport.StatusRemOpErr, 11},
		{transport.StatusRetryExc, 12}, {transport.StatusRNRRetryExc, 13},
		{transport.Status(99), 21}, // IBV_WC_GENERAL_ERR
	} {
		if got := wcStatus(tc.status); got != tc.want {
			t.Errorf("wcStatus(%d) = %d, want %d", tc.status, got, tc.want)
		}
	}
}

func TestSendOpcodes(t *testing.T) {
	for _, tc := range []struct {
		pvrdma uint32 // enum pvrdma_wr_opcode
		want   transport.Opcode
		wc     uint32 // enum pvrdma_wc_opcode of its completion
	}{
		{0, transport.OpWrite, 1}, {1, transport.OpWriteImm, 1}, {2, transport.OpSend, 0}, {3, transport.OpSendImm, 0},
		{4, transport.OpRead, 2}, {5, transport.OpCompSwap, 3}, {6, transport.OpFetchAdd, 4},
		{8, transport.OpSendInv, 0}, {10, transport.OpLocalInv, 7}, {11, transport.OpFastReg, 8},
	} {
		got := opcodeOf(tc.pvrdma)
		if got != tc.want {
			t.Errorf("opcodeOf(%d) = %d, want %d", tc.pvrdma, got, tc.want)
		}
		if wc := wcOpcode(got.Completion()); wc != tc.wc {
			t.Errorf("completion of opcode %d = %d, want %d", tc.pvrdma, wc, tc.wc)
		}
	}
	// LSO, RDMA_READ_WITH_INV, the masked atomics, BIND_MW, REG_SIG_MR, none.
	for _, op := range []uint32{7, 9, 12, 13, 14, 15, 16, 100, 1 << 31} {
		if got := opcodeOf(op); got != transport.OpUnsupported {
			t.Errorf("opcodeOf(%d) = %d, want unsupported", op, got)
		}
	}
	for _, tc := range []struct {
		op   transport.WCOpcode
		want uint32
	}{{transport.WCRecv, 1 << 7}, {transport.WCRecvWriteImm, 1<<7 + 1}} {
		if got := wcOpcode(tc.op); got != tc.want {
			t.Errorf("wcOpcode(%d) = %d, want %d", tc.op, got, tc.want)
		}
	}
}

func TestQPEvent(t *testing.T) {
	for _, tc := range []struct {
		ev   transport.Event
		want uint32 // enum pvrdma_eqe_type
	}{
		{transport.EventQPFatal, 1}, {transport.EventQPRequestErr, 2}, {transport.EventQPAccessError, 3},
		{0, 1}, {99, 1},
	} {
		if got := qpEvent(tc.ev); got != tc.want {
			t.Errorf("qpEvent(%d) = %d, want %d", tc.ev, got, tc.want)
		}
	}
}
