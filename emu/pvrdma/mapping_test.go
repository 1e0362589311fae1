package pvrdma

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
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
		want uint32 // enum pvrdma_eqe_type of the EQE the device writes
	}{
		{transport.EventQPFatal, 1}, {transport.EventQPRequestErr, 2}, {transport.EventQPAccessError, 3},
		{0, 1}, {99, 1},
	} {
		if got := eqeType(hca.QPErrorEvent(tc.ev)); got != tc.want {
			t.Errorf("QP error %d: EQE type %d, want %d", tc.ev, got, tc.want)
		}
	}
}

func TestEQEType(t *testing.T) {
	// enum pvrdma_eqe_type, which pvrdma_dev_api.h numbers as ib_event_type.
	want := [...]uint32{
		hca.EventCQErr: 0, hca.EventQPFatal: 1, hca.EventQPReqErr: 2, hca.EventQPAccessErr: 3,
		hca.EventCommEst: 4, hca.EventSQDrained: 5, hca.EventPathMig: 6, hca.EventPathMigErr: 7,
		hca.EventDeviceFatal: 8, hca.EventPortActive: 9, hca.EventPortErr: 10, hca.EventLIDChange: 11,
		hca.EventPKeyChange: 12, hca.EventSMChange: 13, hca.EventSRQErr: 14, hca.EventSRQLimitReached: 15,
		hca.EventQPLastWQEReached: 16, hca.EventClientReregister: 17, hca.EventGIDChange: 18,
	}
	if len(want) != int(hca.NumEvents) {
		t.Fatalf("%d events checked, the core has %d", len(want), hca.NumEvents)
	}
	for ev, w := range want {
		if got := eqeType(hca.Event(ev)); got != w {
			t.Errorf("eqeType(%v) = %d, want %d", hca.Event(ev), got, w)
		}
	}
	if got := eqeType(hca.NumEvents); got != 1 {
		t.Errorf("eqeType(out of range) = %d, want QP_FATAL", got)
	}
}

func TestCommandNames(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{{"CREATE_QP", "CREATE_QP"}, {"pvrdma_cmd_create_qp", "CREATE_QP"}, {"destroy_srq", "DESTROY_SRQ"}} {
		if got, ok := hca.CommandName(tc.in); !ok || got != tc.want {
			t.Errorf("CommandName(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := hca.CommandName("MLX5_CMD_OP_CREATE_QP"); ok {
		t.Error("a prefix no registered model has was taken")
	}
	if c := command(abi.OpCreateQP); c.Name != "CREATE_QP" || c.Op != uint32(abi.OpCreateQP) {
		t.Errorf("command(OpCreateQP) = %+v", c)
	}
}
