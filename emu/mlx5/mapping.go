package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// transportStates maps mlx5 QP states (enum mlx5_qp_state) to the
// transport's: an explicit table, never a cast (mlx5 puts SQER before
// SQD, the transport SQD before SQE). SQ_DRAINING is the SQD state while
// the SQ drains.
var transportStates = [ifc.NumQPStates]transport.State{
	ifc.QPStateRST: transport.StateReset, ifc.QPStateINIT: transport.StateInit,
	ifc.QPStateRTR: transport.StateRTR, ifc.QPStateRTS: transport.StateRTS,
	ifc.QPStateSQER: transport.StateSQE, ifc.QPStateSQD: transport.StateSQD,
	ifc.QPStateERR: transport.StateErr, ifc.QPStateSQDraining: transport.StateSQD,
}

// transportState is the transport's state for mlx5 QP state s (a state
// the device keeps, so always one of mlx5_qp_state; anything else is ERR).
func transportState(s uint8) transport.State {
	if int(s) >= len(transportStates) {
		return transport.StateErr
	}
	return transportStates[s]
}

// command is an mlx5 command as the core names it (MLX5_CMD_OP_CREATE_QP
// is the core's CREATE_QP, as PVRDMA_CMD_CREATE_QP is).
func command(op ifc.Opcode) hca.Command { return hca.Command{Op: uint32(op), Name: op.String()} }

// The mlx5 command names (MLX5_CMD_OP_*), for what checks the names a user
// writes (fault plans).
func init() {
	set := hca.CommandSet{Model: "mlx5", Prefix: "MLX5_CMD_OP_"}
	for _, op := range ifc.Opcodes() {
		set.Names = append(set.Names, command(op).Name)
	}
	hca.RegisterCommands(set)
}

// syndromes maps the transport's completion statuses (the verbs
// numbering) to the error CQE's syndrome (MLX5_CQE_SYNDROME_*, mlx5dv.h),
// the one the provider's mlx5_handle_error_cqe turns back into that
// ibv_wc_status.
var syndromes = map[transport.Status]uint8{
	transport.StatusLocLenErr:   uverbs.SyndromeLocalLengthErr,
	transport.StatusLocQPOpErr:  uverbs.SyndromeLocalQPOpErr,
	transport.StatusLocProtErr:  uverbs.SyndromeLocalProtErr,
	transport.StatusWRFlushErr:  uverbs.SyndromeWRFlushErr,
	transport.StatusBadRespErr:  uverbs.SyndromeBadRespErr,
	transport.StatusRemInvReq:   uverbs.SyndromeRemoteInvalReqErr,
	transport.StatusRemAccess:   uverbs.SyndromeRemoteAccessErr,
	transport.StatusRemOpErr:    uverbs.SyndromeRemoteOpErr,
	transport.StatusRetryExc:    uverbs.SyndromeTransportRetryExcErr,
	transport.StatusRNRRetryExc: uverbs.SyndromeRNRRetryExcErr,
}

// syndromeOf is the error CQE syndrome of status s: the transport's, or
// one only a fault plan gives (faults.go); a status without one gets a
// syndrome the provider reports as IBV_WC_GENERAL_ERR.
func syndromeOf(s transport.Status) uint8 {
	if v, ok := syndromes[s]; ok {
		return v
	}
	if v, ok := faultSyndromes[s]; ok {
		return v
	}
	return syndromeGeneral
}

// sendOpcodes maps the send WQE opcodes of an RC QP (MLX5_OPCODE_*,
// mlx5dv.h) to the transport's.
var sendOpcodes = map[uint8]transport.Opcode{
	uverbs.OpcodeSend: transport.OpSend, uverbs.OpcodeSendImm: transport.OpSendImm,
	uverbs.OpcodeSendInval: transport.OpSendInv, uverbs.OpcodeRDMAWrite: transport.OpWrite,
	uverbs.OpcodeRDMAWriteImm: transport.OpWriteImm, uverbs.OpcodeRDMARead: transport.OpRead,
	uverbs.OpcodeAtomicCS: transport.OpCompSwap, uverbs.OpcodeAtomicFA: transport.OpFetchAdd,
	uverbs.OpcodeNOP: transport.OpNop,
}

// sendOpcode is the transport's opcode of a send WQE's (OpUnsupported for
// one the device does not carry out: UMR on a user QP, masked atomics,
// ...).
func sendOpcode(op uint8) transport.Opcode { return sendOpcodes[op] }
