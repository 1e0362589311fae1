package mlx5

// syndromes is the provider's mlx5_handle_error_cqe (cq.c): an error CQE's
// syndrome → the enum ibv_wc_status (verbs.h) it reports, the IBTA / verbs
// numbering emu/transport's Status uses.
var syndromes = [...]struct{ syndrome, status uint8 }{
	{SyndromeLocalLengthErr, 1},        // IBV_WC_LOC_LEN_ERR
	{SyndromeLocalQPOpErr, 2},          // IBV_WC_LOC_QP_OP_ERR
	{SyndromeLocalProtErr, 4},          // IBV_WC_LOC_PROT_ERR
	{SyndromeWRFlushErr, 5},            // IBV_WC_WR_FLUSH_ERR
	{SyndromeMWBindErr, 6},             // IBV_WC_MW_BIND_ERR
	{SyndromeBadRespErr, 7},            // IBV_WC_BAD_RESP_ERR
	{SyndromeLocalAccessErr, 8},        // IBV_WC_LOC_ACCESS_ERR
	{SyndromeRemoteInvalReqErr, 9},     // IBV_WC_REM_INV_REQ_ERR
	{SyndromeRemoteAccessErr, 10},      // IBV_WC_REM_ACCESS_ERR
	{SyndromeRemoteOpErr, 11},          // IBV_WC_REM_OP_ERR
	{SyndromeTransportRetryExcErr, 12}, // IBV_WC_RETRY_EXC_ERR
	{SyndromeRNRRetryExcErr, 13},       // IBV_WC_RNR_RETRY_EXC_ERR
	{SyndromeRemoteAbortedErr, 16},     // IBV_WC_REM_ABORT_ERR
}

// WCGeneralErr is IBV_WC_GENERAL_ERR, what the provider reports for a
// syndrome it does not name.
const WCGeneralErr = 21

// WCStatus is the ibv_wc_status the provider reports for an error CQE with
// this syndrome.
func WCStatus(syndrome uint8) uint32 {
	for _, s := range syndromes {
		if s.syndrome == syndrome {
			return uint32(s.status)
		}
	}
	return WCGeneralErr
}

// SyndromeFor is the syndrome the provider reports as ibv_wc_status
// status, the inverse of WCStatus; false for a status no syndrome gives
// (success, or one mlx5 never reports: the device's mapping picks one).
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
// CQERespSendInv (an invalidated rkey) or CQERespSend, as the provider's
// handle_responder reads them back. A send completion is a CQEReq carrying
// the WQE's opcode in SOpcode.
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
