package emu

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// The mappings between PVRDMA's values and the transport's (the shared
// core's): explicit tables, never casts, so a model whose numbering differs
// (mlx5's CQE syndromes, its QP states) maps its own way. Each is checked
// value by value in mapping_test.go.

// transportStates maps PVRDMA QP states (enum pvrdma_qp_state) to the
// transport's.
var transportStates = [pvrdma.NumQPStates]transport.State{
	pvrdma.QPStateReset: transport.StateReset, pvrdma.QPStateInit: transport.StateInit,
	pvrdma.QPStateRTR: transport.StateRTR, pvrdma.QPStateRTS: transport.StateRTS,
	pvrdma.QPStateSQD: transport.StateSQD, pvrdma.QPStateSQE: transport.StateSQE,
	pvrdma.QPStateErr: transport.StateErr,
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
// (pvrdma_wc_status).
var wcStatuses = map[transport.Status]uint32{
	transport.StatusSuccess:     uverbs.WCSuccess,
	transport.StatusLocLenErr:   uverbs.WCLocLenErr,
	transport.StatusLocQPOpErr:  uverbs.WCLocQPOpErr,
	transport.StatusLocProtErr:  uverbs.WCLocProtErr,
	transport.StatusWRFlushErr:  uverbs.WCWRFlushErr,
	transport.StatusBadRespErr:  uverbs.WCBadRespErr,
	transport.StatusRemInvReq:   uverbs.WCRemInvReqErr,
	transport.StatusRemAccess:   uverbs.WCRemAccessErr,
	transport.StatusRemOpErr:    uverbs.WCRemOpErr,
	transport.StatusRetryExc:    uverbs.WCRetryExcErr,
	transport.StatusRNRRetryExc: uverbs.WCRNRRetryExc,
}

// wcStatus is the PVRDMA completion status of transport status s
// (IBV_WC_GENERAL_ERR for one PVRDMA has no name for).
func wcStatus(s transport.Status) uint32 {
	if st, ok := wcStatuses[s]; ok {
		return st
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

// qpEvents maps the transport's QP errors to PVRDMA async events.
var qpEvents = [...]uint32{
	transport.EventQPFatal:       pvrdma.EventQPFatal,
	transport.EventQPRequestErr:  pvrdma.EventQPReqErr,
	transport.EventQPAccessError: pvrdma.EventQPAccessErr,
}

// qpEvent is the PVRDMA async event of transport error ev (QP_FATAL for
// one it has no name for).
func qpEvent(ev transport.Event) uint32 {
	if ev == 0 || int(ev) >= len(qpEvents) {
		return pvrdma.EventQPFatal
	}
	return qpEvents[ev]
}

// eqeTypes maps the core's async events to PVRDMA's (enum pvrdma_eqe_type).
var eqeTypes = [hca.NumEvents]uint32{
	hca.EventCQErr: pvrdma.EventCQErr, hca.EventQPFatal: pvrdma.EventQPFatal, hca.EventQPReqErr: pvrdma.EventQPReqErr,
	hca.EventQPAccessErr: pvrdma.EventQPAccessErr, hca.EventCommEst: pvrdma.EventCommEst,
	hca.EventSQDrained: pvrdma.EventSQDrained, hca.EventPathMig: pvrdma.EventPathMig,
	hca.EventPathMigErr: pvrdma.EventPathMigErr, hca.EventDeviceFatal: pvrdma.EventDeviceFatal,
	hca.EventPortActive: pvrdma.EventPortActive, hca.EventPortErr: pvrdma.EventPortErr,
	hca.EventLIDChange: pvrdma.EventLIDChange, hca.EventPKeyChange: pvrdma.EventPKeyChange,
	hca.EventSMChange: pvrdma.EventSMChange, hca.EventSRQErr: pvrdma.EventSRQErr,
	hca.EventSRQLimitReached: pvrdma.EventSRQLimitReached, hca.EventQPLastWQEReached: pvrdma.EventQPLastWQEReached,
	hca.EventClientReregister: pvrdma.EventClientReregister, hca.EventGIDChange: pvrdma.EventGIDChange,
}

// eqeType is the PVRDMA async event of the core's ev (QP_FATAL for one
// out of range: the core names no other).
func eqeType(ev hca.Event) uint32 {
	if ev >= hca.NumEvents {
		return pvrdma.EventQPFatal
	}
	return eqeTypes[ev]
}

// command is a PVRDMA command as the core names it.
func command(op pvrdma.Opcode) hca.Command { return hca.Command{Op: uint32(op), Name: op.String()} }

// The PVRDMA command names (PVRDMA_CMD_*), for what checks the names a
// user writes (fault plans).
func init() {
	set := hca.CommandSet{Model: "pvrdma", Prefix: "PVRDMA_CMD_"}
	for op := range pvrdma.NumOpcodes {
		set.Names = append(set.Names, op.String())
	}
	hca.RegisterCommands(set)
}
