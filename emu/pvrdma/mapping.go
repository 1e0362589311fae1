package pvrdma

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// The mappings between PVRDMA's values and the transport's (the shared
// core's): explicit tables, never casts, so a model whose numbering differs
// (mlx5's CQE syndromes, its QP states) maps its own way. Each is checked
// value by value in mapping_test.go.

// transportStates maps PVRDMA QP states (enum pvrdma_qp_state) to the
// transport's.
var transportStates = [abi.NumQPStates]transport.State{
	abi.QPStateReset: transport.StateReset, abi.QPStateInit: transport.StateInit,
	abi.QPStateRTR: transport.StateRTR, abi.QPStateRTS: transport.StateRTS,
	abi.QPStateSQD: transport.StateSQD, abi.QPStateSQE: transport.StateSQE,
	abi.QPStateErr: transport.StateErr,
}

// transportState is the transport's state for PVRDMA QP state s (a state
// the device keeps, so always one of pvrdma_qp_state; anything else is ERR).
func transportState(s uint8) transport.State {
	if int(s) >= len(transportStates) {
		return transport.StateErr
	}
	return transportStates[s]
}

// wcStatuses maps the transport's completion statuses to PVRDMA's
// (pvrdma_wc_status); ok marks the mapped entries (an array: it is read
// for every CQE).
var wcStatuses = [...]struct {
	status uint32
	ok     bool
}{
	transport.StatusSuccess:     {uverbs.WCSuccess, true},
	transport.StatusLocLenErr:   {uverbs.WCLocLenErr, true},
	transport.StatusLocQPOpErr:  {uverbs.WCLocQPOpErr, true},
	transport.StatusLocProtErr:  {uverbs.WCLocProtErr, true},
	transport.StatusWRFlushErr:  {uverbs.WCWRFlushErr, true},
	transport.StatusBadRespErr:  {uverbs.WCBadRespErr, true},
	transport.StatusRemInvReq:   {uverbs.WCRemInvReqErr, true},
	transport.StatusRemAccess:   {uverbs.WCRemAccessErr, true},
	transport.StatusRemOpErr:    {uverbs.WCRemOpErr, true},
	transport.StatusRetryExc:    {uverbs.WCRetryExcErr, true},
	transport.StatusRNRRetryExc: {uverbs.WCRNRRetryExc, true},
}

// wcStatus is the PVRDMA completion status of transport status s
// (IBV_WC_GENERAL_ERR for one PVRDMA has no name for).
func wcStatus(s transport.Status) uint32 {
	if int(s) < len(wcStatuses) && wcStatuses[s].ok {
		return wcStatuses[s].status
	}
	return uverbs.WCGeneralErr
}

// opcodes maps PVRDMA send opcodes (pvrdma_wr_opcode) to the transport's
// (missing ones are OpUnsupported).
var opcodes = [...]transport.Opcode{
	uverbs.OpSend: transport.OpSend, uverbs.OpSendImm: transport.OpSendImm, uverbs.OpSendInv: transport.OpSendInv,
	uverbs.OpRDMAWrite: transport.OpWrite, uverbs.OpRDMAWriteImm: transport.OpWriteImm,
	uverbs.OpRDMARead: transport.OpRead, uverbs.OpAtomicCmpSwp: transport.OpCompSwap,
	uverbs.OpAtomicFetchAdd: transport.OpFetchAdd, uverbs.OpLocalInv: transport.OpLocalInv,
	uverbs.OpFastRegMR: transport.OpFastReg,
}

// opcodeOf is the transport's opcode of PVRDMA send opcode op.
func opcodeOf(op uint32) transport.Opcode {
	if op >= uint32(len(opcodes)) {
		return transport.OpUnsupported
	}
	return opcodes[op]
}

// wcOpcodes maps the transport's completion opcodes to PVRDMA's
// (pvrdma_wc_opcode).
var wcOpcodes = [...]uint32{
	transport.WCSend: uverbs.WCSend, transport.WCWrite: uverbs.WCRDMAWrite, transport.WCRead: uverbs.WCRDMARead,
	transport.WCCompSwap: uverbs.WCCompSwap, transport.WCFetchAdd: uverbs.WCFetchAdd,
	transport.WCLocalInv: uverbs.WCLocalInv, transport.WCFastReg: uverbs.WCFastRegMR,
	transport.WCRecv: uverbs.WCRecv, transport.WCRecvWriteImm: uverbs.WCRecvRDMAImm,
}

// wcOpcode is the PVRDMA completion opcode of the transport's op.
func wcOpcode(op transport.WCOpcode) uint32 {
	if int(op) >= len(wcOpcodes) {
		return uverbs.WCSend // not reached: the transport names no other
	}
	return wcOpcodes[op]
}

// eqeTypes maps the core's async events to PVRDMA's (enum pvrdma_eqe_type).
var eqeTypes = [hca.NumEvents]uint32{
	hca.EventCQErr: abi.EventCQErr, hca.EventQPFatal: abi.EventQPFatal, hca.EventQPReqErr: abi.EventQPReqErr,
	hca.EventQPAccessErr: abi.EventQPAccessErr, hca.EventCommEst: abi.EventCommEst,
	hca.EventSQDrained: abi.EventSQDrained, hca.EventPathMig: abi.EventPathMig,
	hca.EventPathMigErr: abi.EventPathMigErr, hca.EventDeviceFatal: abi.EventDeviceFatal,
	hca.EventPortActive: abi.EventPortActive, hca.EventPortErr: abi.EventPortErr,
	hca.EventLIDChange: abi.EventLIDChange, hca.EventPKeyChange: abi.EventPKeyChange,
	hca.EventSMChange: abi.EventSMChange, hca.EventSRQErr: abi.EventSRQErr,
	hca.EventSRQLimitReached: abi.EventSRQLimitReached, hca.EventQPLastWQEReached: abi.EventQPLastWQEReached,
	hca.EventClientReregister: abi.EventClientReregister, hca.EventGIDChange: abi.EventGIDChange,
}

// eqeType is the PVRDMA async event of the core's ev (QP_FATAL for one
// out of range: the core names no other).
func eqeType(ev hca.Event) uint32 {
	if ev >= hca.NumEvents {
		return abi.EventQPFatal
	}
	return eqeTypes[ev]
}

// command is a PVRDMA command as the core names it.
func command(op abi.Opcode) hca.Command { return hca.Command{Op: uint32(op), Name: op.String()} }

// The PVRDMA command names (PVRDMA_CMD_*), for what checks the names a
// user writes (fault plans).
func init() {
	set := hca.CommandSet{Model: "pvrdma", Prefix: "PVRDMA_CMD_"}
	for op := range abi.NumOpcodes {
		set.Names = append(set.Names, op.String())
	}
	hca.RegisterCommands(set)
}
