package mlx5

// Completion statuses (enum ibv_wc_status, verbs.h): the IBTA / verbs
// numbering the provider reports an error CQE's syndrome as, and the one
// emu/transport's Status uses.
const (
	WCSuccess        = 0
	WCLocLenErr      = 1
	WCLocQPOpErr     = 2
	WCLocProtErr     = 4
	WCWRFlushErr     = 5
	WCMWBindErr      = 6
	WCBadRespErr     = 7
	WCLocAccessErr   = 8
	WCRemInvReqErr   = 9
	WCRemAccessErr   = 10
	WCRemOpErr       = 11
	WCRetryExcErr    = 12
	WCRNRRetryExcErr = 13
	WCRemAbortErr    = 16
	WCGeneralErr     = 21
)

// Completion opcodes (enum ibv_wc_opcode, verbs.h).
const (
	WCSend            = 0
	WCRDMAWrite       = 1
	WCRDMARead        = 2
	WCCompSwap        = 3
	WCFetchAdd        = 4
	WCBindMW          = 5
	WCLocalInv        = 6
	WCTSO             = 7
	WCRecv            = 128
	WCRecvRDMAWithImm = 129
)

// syndromes is the provider's mlx5_handle_error_cqe (cq.c): error CQE
// syndrome → ibv_wc_status.
var syndromes = [...]struct{ syndrome, status uint8 }{
	{SyndromeLocalLengthErr, WCLocLenErr},
	{SyndromeLocalQPOpErr, WCLocQPOpErr},
	{SyndromeLocalProtErr, WCLocProtErr},
	{SyndromeWRFlushErr, WCWRFlushErr},
	{SyndromeMWBindErr, WCMWBindErr},
	{SyndromeBadRespErr, WCBadRespErr},
	{SyndromeLocalAccessErr, WCLocAccessErr},
	{SyndromeRemoteInvalReqErr, WCRemInvReqErr},
	{SyndromeRemoteAccessErr, WCRemAccessErr},
	{SyndromeRemoteOpErr, WCRemOpErr},
	{SyndromeTransportRetryExcErr, WCRetryExcErr},
	{SyndromeRNRRetryExcErr, WCRNRRetryExcErr},
	{SyndromeRemoteAbortedErr, WCRemAbortErr},
}

// WCStatus is the ibv_wc_status the provider reports for an error CQE with
// this syndrome: IBV_WC_GENERAL_ERR for any syndrome it does not name.
func WCStatus(syndrome uint8) uint32 {
	for _, s := range syndromes {
		if s.syndrome == syndrome {
			return uint32(s.status)
		}
	}
	return WCGeneralErr
}

// SyndromeFor is the syndrome that the provider reports as ibv_wc_status
// status, the inverse of WCStatus; false for a status no syndrome gives
// (success, or one mlx5 does not report: a device reports those as
// SyndromeRemoteOpErr or whatever its mapping chooses).
func SyndromeFor(status uint32) (uint8, bool) {
	for _, s := range syndromes {
		if uint32(s.status) == status {
			return s.syndrome, true
		}
	}
	return 0, false
}

// RespOpcode is the CQE opcode of a receive completion: CQERespWRImm for an
// RDMA WRITE with immediate, else CQERespSendImm (immediate data),
// CQERespSendInv (an invalidated rkey) or CQERespSend (cq.c
// handle_responder's reading).
func RespOpcode(writeImm, imm, inval bool) uint8 {
	switch {
	case writeImm:
		return CQERespWRImm
	case imm:
		return CQERespSendImm
	case inval:
		return CQERespSendInv
	}
	return CQERespSend
}

// ReqWCOpcode is the ibv_wc_opcode the provider reports for a REQ CQE whose
// sop_drop_qpn carries WQE opcode op (cq.c handle_good_req), and whether
// it sets IBV_WC_WITH_IMM; ok is false for the opcodes it reports from its
// own bookkeeping (NOP, UMR) or not at all.
func ReqWCOpcode(op uint8) (wc uint32, imm, ok bool) {
	switch op {
	case OpcodeRDMAWriteImm:
		return WCRDMAWrite, true, true
	case OpcodeRDMAWrite:
		return WCRDMAWrite, false, true
	case OpcodeSendImm:
		return WCSend, true, true
	case OpcodeSend, OpcodeSendInval:
		return WCSend, false, true
	case OpcodeRDMARead:
		return WCRDMARead, false, true
	case OpcodeAtomicCS:
		return WCCompSwap, false, true
	case OpcodeAtomicFA:
		return WCFetchAdd, false, true
	case OpcodeTSO:
		return WCTSO, false, true
	}
	return 0, false, false
}
