package abi

import "fmt"

// Opcode is a command opcode (PVRDMA_CMD_*), the cmd field of CmdHdr.
type Opcode uint32

// Command opcodes.
const (
	OpQueryPort Opcode = iota
	OpQueryPKey
	OpCreatePD
	OpDestroyPD
	OpCreateMR
	OpDestroyMR
	OpCreateCQ
	OpResizeCQ
	OpDestroyCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCreateUC
	OpDestroyUC
	OpCreateBind
	OpDestroyBind
	OpCreateSRQ
	OpModifySRQ
	OpQuerySRQ
	OpDestroySRQ
	NumOpcodes // PVRDMA_CMD_MAX
)

// AckBase is PVRDMA_CMD_FIRST_RESP: a response's ack is AckBase + opcode
// (PVRDMA_CMD_*_RESP, including the *_RESP_NOOP ones).
const AckBase = 1 << 31

// Ack is the response code the device answers this opcode with.
func (op Opcode) Ack() uint32 { return AckBase + uint32(op) }

var opNames = [NumOpcodes]string{
	"QUERY_PORT", "QUERY_PKEY", "CREATE_PD", "DESTROY_PD", "CREATE_MR", "DESTROY_MR",
	"CREATE_CQ", "RESIZE_CQ", "DESTROY_CQ", "CREATE_QP", "MODIFY_QP", "QUERY_QP",
	"DESTROY_QP", "CREATE_UC", "DESTROY_UC", "CREATE_BIND", "DESTROY_BIND",
	"CREATE_SRQ", "MODIFY_SRQ", "QUERY_SRQ", "DESTROY_SRQ",
}

func (op Opcode) String() string {
	if op < NumOpcodes {
		return opNames[op]
	}
	return fmt.Sprintf("CMD_%d", uint32(op))
}

// Slot sizes: the driver copies the whole request union into the command
// slot; the largest response is QUERY_QP's.
const (
	CmdReqSize  = 184 // sizeof(union pvrdma_cmd_req)
	CmdRespSize = 176 // sizeof(union pvrdma_cmd_resp)
)

// CmdHdr is pvrdma_cmd_hdr, the first 16 bytes of every request.
type CmdHdr struct {
	Response uint64 // key echoed in the response
	Cmd      Opcode
}

// CmdHdrSize is the size of pvrdma_cmd_hdr.
const CmdHdrSize = 16

// Encode writes the header into b[:CmdHdrSize].
func (h *CmdHdr) Encode(b []byte) {
	le.PutUint64(b[0:], h.Response)
	le.PutUint32(b[8:], uint32(h.Cmd))
	le.PutUint32(b[12:], 0)
}

// Decode reads the header from b[:CmdHdrSize].
func (h *CmdHdr) Decode(b []byte) {
	_ = b[CmdHdrSize-1]
	h.Response, h.Cmd = le.Uint64(b[0:]), Opcode(le.Uint32(b[8:]))
}

// CmdRespHdr is pvrdma_cmd_resp_hdr, the first 16 bytes of every response.
type CmdRespHdr struct {
	Response uint64 // from the request's CmdHdr
	Ack      uint32 // Opcode.Ack of the request
	Err      uint8  // errno; 0 on success
}

// CmdRespHdrSize is the size of pvrdma_cmd_resp_hdr.
const CmdRespHdrSize = 16

// Encode writes the header into b[:CmdRespHdrSize].
func (h *CmdRespHdr) Encode(b []byte) {
	le.PutUint64(b[0:], h.Response)
	le.PutUint32(b[8:], h.Ack)
	b[12], b[13], b[14], b[15] = h.Err, 0, 0, 0
}

// Decode reads the header from b[:CmdRespHdrSize].
func (h *CmdRespHdr) Decode(b []byte) {
	_ = b[CmdRespHdrSize-1]
	h.Response, h.Ack, h.Err = le.Uint64(b[0:]), le.Uint32(b[8:]), b[12]
}

// Request is a command request structure.
type Request interface {
	// Opcode is the command this structure is the request of.
	Opcode() Opcode
	// Encode writes the request, header included, into b[:size]; b must
	// hold the structure (CmdReqSize always does).
	Encode(b []byte)
	// Decode reads the request from b[:size].
	Decode(b []byte)
}

// Response is a command response structure.
type Response interface {
	// Encode writes the response, header included, into b[:size].
	Encode(b []byte)
	// Decode reads the response from b[:size].
	Decode(b []byte)
}

// Message sizes (sizeof the C structs on x86-64).
const (
	CmdQueryPortSize     = 24
	CmdQueryPortRespSize = 64
	CmdQueryPKeySize     = 24
	CmdQueryPKeyRespSize = 24
	CmdCreateUCSize      = 24
	CmdCreateUCRespSize  = 24
	CmdDestroyUCSize     = 24
	CmdCreatePDSize      = 24
	CmdCreatePDRespSize  = 24
	CmdDestroyPDSize     = 24
	CmdCreateMRSize      = 56
	CmdCreateMRRespSize  = 32
	CmdDestroyMRSize     = 24
	CmdCreateCQSize      = 40
	CmdCreateCQRespSize  = 24
	CmdResizeCQSize      = 24
	CmdResizeCQRespSize  = 24
	CmdDestroyCQSize     = 24
	CmdCreateSRQSize     = 56
	CmdCreateSRQRespSize = 24
	CmdModifySRQSize     = 40
	CmdQuerySRQSize      = 24
	CmdQuerySRQRespSize  = 32
	CmdDestroySRQSize    = 24
	CmdCreateQPSize      = 80
	CmdCreateQPRespSize  = 48 // 44 bytes of fields, padded to the header's 8-byte alignment
	CmdModifyQPSize      = 184
	CmdQueryQPSize       = 24
	CmdQueryQPRespSize   = 176
	CmdDestroyQPSize     = 24
	CmdDestroyQPRespSize = 24
	CmdCreateBindSize    = 48
	CmdDestroyBindSize   = 40
	CmdRespHdrOnlySize   = CmdRespHdrSize // responses without a body (*_RESP_NOOP, MODIFY_QP, MODIFY_SRQ, DESTROY_SRQ)
)

// CmdQueryPort is pvrdma_cmd_query_port.
type CmdQueryPort struct {
	Hdr     CmdHdr
	PortNum uint8
}

func (*CmdQueryPort) Opcode() Opcode { return OpQueryPort }

func (c *CmdQueryPort) Encode(b []byte) {
	c.Hdr.Encode(b)
	clear(b[16:CmdQueryPortSize])
	b[16] = c.PortNum
}

func (c *CmdQueryPort) Decode(b []byte) {
	_ = b[CmdQueryPortSize-1]
	c.Hdr.Decode(b)
	c.PortNum = b[16]
}

// CmdQueryPortResp is pvrdma_cmd_query_port_resp.
type CmdQueryPortResp struct {
	Hdr   CmdRespHdr
	Attrs PortAttr
}

func (c *CmdQueryPortResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	c.Attrs.Encode(b[16:])
}

func (c *CmdQueryPortResp) Decode(b []byte) {
	_ = b[CmdQueryPortRespSize-1]
	c.Hdr.Decode(b)
	c.Attrs.Decode(b[16:])
}

// CmdQueryPKey is pvrdma_cmd_query_pkey.
type CmdQueryPKey struct {
	Hdr     CmdHdr
	PortNum uint8
	Index   uint8
}

func (*CmdQueryPKey) Opcode() Opcode { return OpQueryPKey }

func (c *CmdQueryPKey) Encode(b []byte) {
	c.Hdr.Encode(b)
	clear(b[16:CmdQueryPKeySize])
	b[16], b[17] = c.PortNum, c.Index
}

func (c *CmdQueryPKey) Decode(b []byte) {
	_ = b[CmdQueryPKeySize-1]
	c.Hdr.Decode(b)
	c.PortNum, c.Index = b[16], b[17]
}

// CmdQueryPKeyResp is pvrdma_cmd_query_pkey_resp.
type CmdQueryPKeyResp struct {
	Hdr  CmdRespHdr
	PKey uint16
}

func (c *CmdQueryPKeyResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	clear(b[16:CmdQueryPKeyRespSize])
	le.PutUint16(b[16:], c.PKey)
}

func (c *CmdQueryPKeyResp) Decode(b []byte) {
	_ = b[CmdQueryPKeyRespSize-1]
	c.Hdr.Decode(b)
	c.PKey = le.Uint16(b[16:])
}

// encodeHandleReq and the three below serve the messages whose body is one
// u32 (a handle, mostly) followed by four reserved bytes.
func encodeHandleReq(h *CmdHdr, handle uint32, b []byte) {
	h.Encode(b)
	le.PutUint32(b[16:], handle)
	le.PutUint32(b[20:], 0)
}

func decodeHandleReq(h *CmdHdr, b []byte) uint32 {
	_ = b[23]
	h.Decode(b)
	return le.Uint32(b[16:])
}

func encodeHandleResp(h *CmdRespHdr, handle uint32, b []byte) {
	h.Encode(b)
	le.PutUint32(b[16:], handle)
	le.PutUint32(b[20:], 0)
}

func decodeHandleResp(h *CmdRespHdr, b []byte) uint32 {
	_ = b[23]
	h.Decode(b)
	return le.Uint32(b[16:])
}

// CmdCreateUC is pvrdma_cmd_create_uc.
type CmdCreateUC struct {
	Hdr   CmdHdr
	PFN64 uint64 // the UAR page's PFN (pfn64; a 32-bit pfn before VersionPPN64)
}

func (*CmdCreateUC) Opcode() Opcode { return OpCreateUC }

func (c *CmdCreateUC) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint64(b[16:], c.PFN64)
}

func (c *CmdCreateUC) Decode(b []byte) {
	_ = b[CmdCreateUCSize-1]
	c.Hdr.Decode(b)
	c.PFN64 = le.Uint64(b[16:])
}

// CmdCreateUCResp is pvrdma_cmd_create_uc_resp.
type CmdCreateUCResp struct {
	Hdr       CmdRespHdr
	CtxHandle uint32
}

func (c *CmdCreateUCResp) Encode(b []byte) { encodeHandleResp(&c.Hdr, c.CtxHandle, b) }
func (c *CmdCreateUCResp) Decode(b []byte) { c.CtxHandle = decodeHandleResp(&c.Hdr, b) }

// CmdDestroyUC is pvrdma_cmd_destroy_uc.
type CmdDestroyUC struct {
	Hdr       CmdHdr
	CtxHandle uint32
}

func (*CmdDestroyUC) Opcode() Opcode    { return OpDestroyUC }
func (c *CmdDestroyUC) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.CtxHandle, b) }
func (c *CmdDestroyUC) Decode(b []byte) { c.CtxHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreatePD is pvrdma_cmd_create_pd.
type CmdCreatePD struct {
	Hdr       CmdHdr
	CtxHandle uint32 // 0: a kernel PD
}

func (*CmdCreatePD) Opcode() Opcode    { return OpCreatePD }
func (c *CmdCreatePD) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.CtxHandle, b) }
func (c *CmdCreatePD) Decode(b []byte) { c.CtxHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreatePDResp is pvrdma_cmd_create_pd_resp.
type CmdCreatePDResp struct {
	Hdr      CmdRespHdr
	PDHandle uint32
}

func (c *CmdCreatePDResp) Encode(b []byte) { encodeHandleResp(&c.Hdr, c.PDHandle, b) }
func (c *CmdCreatePDResp) Decode(b []byte) { c.PDHandle = decodeHandleResp(&c.Hdr, b) }

// CmdDestroyPD is pvrdma_cmd_destroy_pd.
type CmdDestroyPD struct {
	Hdr      CmdHdr
	PDHandle uint32
}

func (*CmdDestroyPD) Opcode() Opcode    { return OpDestroyPD }
func (c *CmdDestroyPD) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.PDHandle, b) }
func (c *CmdDestroyPD) Decode(b []byte) { c.PDHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreateMR is pvrdma_cmd_create_mr.
type CmdCreateMR struct {
	Hdr         CmdHdr
	Start       uint64
	Length      uint64
	PdirDMA     uint64
	PDHandle    uint32
	AccessFlags uint32 // Access*
	Flags       uint32 // MRFlag*
	NChunks     uint32
}

func (*CmdCreateMR) Opcode() Opcode { return OpCreateMR }

func (c *CmdCreateMR) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint64(b[16:], c.Start)
	le.PutUint64(b[24:], c.Length)
	le.PutUint64(b[32:], c.PdirDMA)
	le.PutUint32(b[40:], c.PDHandle)
	le.PutUint32(b[44:], c.AccessFlags)
	le.PutUint32(b[48:], c.Flags)
	le.PutUint32(b[52:], c.NChunks)
}

func (c *CmdCreateMR) Decode(b []byte) {
	_ = b[CmdCreateMRSize-1]
	c.Hdr.Decode(b)
	c.Start, c.Length, c.PdirDMA = le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
	c.PDHandle, c.AccessFlags = le.Uint32(b[40:]), le.Uint32(b[44:])
	c.Flags, c.NChunks = le.Uint32(b[48:]), le.Uint32(b[52:])
}

// CmdCreateMRResp is pvrdma_cmd_create_mr_resp.
type CmdCreateMRResp struct {
	Hdr      CmdRespHdr
	MRHandle uint32
	LKey     uint32
	RKey     uint32
}

func (c *CmdCreateMRResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.MRHandle)
	le.PutUint32(b[20:], c.LKey)
	le.PutUint32(b[24:], c.RKey)
	le.PutUint32(b[28:], 0)
}

func (c *CmdCreateMRResp) Decode(b []byte) {
	_ = b[CmdCreateMRRespSize-1]
	c.Hdr.Decode(b)
	c.MRHandle, c.LKey, c.RKey = le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:])
}

// CmdDestroyMR is pvrdma_cmd_destroy_mr.
type CmdDestroyMR struct {
	Hdr      CmdHdr
	MRHandle uint32
}

func (*CmdDestroyMR) Opcode() Opcode    { return OpDestroyMR }
func (c *CmdDestroyMR) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.MRHandle, b) }
func (c *CmdDestroyMR) Decode(b []byte) { c.MRHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreateCQ is pvrdma_cmd_create_cq.
type CmdCreateCQ struct {
	Hdr       CmdHdr
	PdirDMA   uint64
	CtxHandle uint32
	CQE       uint32 // entries
	NChunks   uint32 // pages, ring state included
}

func (*CmdCreateCQ) Opcode() Opcode { return OpCreateCQ }

func (c *CmdCreateCQ) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint64(b[16:], c.PdirDMA)
	le.PutUint32(b[24:], c.CtxHandle)
	le.PutUint32(b[28:], c.CQE)
	le.PutUint32(b[32:], c.NChunks)
	le.PutUint32(b[36:], 0)
}

func (c *CmdCreateCQ) Decode(b []byte) {
	_ = b[CmdCreateCQSize-1]
	c.Hdr.Decode(b)
	c.PdirDMA = le.Uint64(b[16:])
	c.CtxHandle, c.CQE, c.NChunks = le.Uint32(b[24:]), le.Uint32(b[28:]), le.Uint32(b[32:])
}

// CmdCreateCQResp is pvrdma_cmd_create_cq_resp.
type CmdCreateCQResp struct {
	Hdr      CmdRespHdr
	CQHandle uint32
	CQE      uint32
}

func (c *CmdCreateCQResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.CQHandle)
	le.PutUint32(b[20:], c.CQE)
}

func (c *CmdCreateCQResp) Decode(b []byte) {
	_ = b[CmdCreateCQRespSize-1]
	c.Hdr.Decode(b)
	c.CQHandle, c.CQE = le.Uint32(b[16:]), le.Uint32(b[20:])
}

// CmdResizeCQ is pvrdma_cmd_resize_cq.
type CmdResizeCQ struct {
	Hdr      CmdHdr
	CQHandle uint32
	CQE      uint32
}

func (*CmdResizeCQ) Opcode() Opcode { return OpResizeCQ }

func (c *CmdResizeCQ) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.CQHandle)
	le.PutUint32(b[20:], c.CQE)
}

func (c *CmdResizeCQ) Decode(b []byte) {
	_ = b[CmdResizeCQSize-1]
	c.Hdr.Decode(b)
	c.CQHandle, c.CQE = le.Uint32(b[16:]), le.Uint32(b[20:])
}

// CmdResizeCQResp is pvrdma_cmd_resize_cq_resp.
type CmdResizeCQResp struct {
	Hdr CmdRespHdr
	CQE uint32
}

func (c *CmdResizeCQResp) Encode(b []byte) { encodeHandleResp(&c.Hdr, c.CQE, b) }
func (c *CmdResizeCQResp) Decode(b []byte) { c.CQE = decodeHandleResp(&c.Hdr, b) }

// CmdDestroyCQ is pvrdma_cmd_destroy_cq.
type CmdDestroyCQ struct {
	Hdr      CmdHdr
	CQHandle uint32
}

func (*CmdDestroyCQ) Opcode() Opcode    { return OpDestroyCQ }
func (c *CmdDestroyCQ) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.CQHandle, b) }
func (c *CmdDestroyCQ) Decode(b []byte) { c.CQHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreateSRQ is pvrdma_cmd_create_srq.
type CmdCreateSRQ struct {
	Hdr      CmdHdr
	PdirDMA  uint64
	PDHandle uint32
	NChunks  uint32
	Attrs    SRQAttr
	SRQType  uint8 // SRQTypeBasic
}

func (*CmdCreateSRQ) Opcode() Opcode { return OpCreateSRQ }

func (c *CmdCreateSRQ) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint64(b[16:], c.PdirDMA)
	le.PutUint32(b[24:], c.PDHandle)
	le.PutUint32(b[28:], c.NChunks)
	c.Attrs.Encode(b[32:])
	clear(b[48:CmdCreateSRQSize])
	b[48] = c.SRQType
}

func (c *CmdCreateSRQ) Decode(b []byte) {
	_ = b[CmdCreateSRQSize-1]
	c.Hdr.Decode(b)
	c.PdirDMA = le.Uint64(b[16:])
	c.PDHandle, c.NChunks = le.Uint32(b[24:]), le.Uint32(b[28:])
	c.Attrs.Decode(b[32:])
	c.SRQType = b[48]
}

// CmdCreateSRQResp is pvrdma_cmd_create_srq_resp.
type CmdCreateSRQResp struct {
	Hdr  CmdRespHdr
	SRQN uint32 // the SRQ handle
}

func (c *CmdCreateSRQResp) Encode(b []byte) { encodeHandleResp(&c.Hdr, c.SRQN, b) }
func (c *CmdCreateSRQResp) Decode(b []byte) { c.SRQN = decodeHandleResp(&c.Hdr, b) }

// CmdModifySRQ is pvrdma_cmd_modify_srq.
type CmdModifySRQ struct {
	Hdr       CmdHdr
	SRQHandle uint32
	AttrMask  uint32 // SRQAttr* bits
	Attrs     SRQAttr
}

func (*CmdModifySRQ) Opcode() Opcode { return OpModifySRQ }

func (c *CmdModifySRQ) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.SRQHandle)
	le.PutUint32(b[20:], c.AttrMask)
	c.Attrs.Encode(b[24:])
}

func (c *CmdModifySRQ) Decode(b []byte) {
	_ = b[CmdModifySRQSize-1]
	c.Hdr.Decode(b)
	c.SRQHandle, c.AttrMask = le.Uint32(b[16:]), le.Uint32(b[20:])
	c.Attrs.Decode(b[24:])
}

// CmdQuerySRQ is pvrdma_cmd_query_srq.
type CmdQuerySRQ struct {
	Hdr       CmdHdr
	SRQHandle uint32
}

func (*CmdQuerySRQ) Opcode() Opcode    { return OpQuerySRQ }
func (c *CmdQuerySRQ) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.SRQHandle, b) }
func (c *CmdQuerySRQ) Decode(b []byte) { c.SRQHandle = decodeHandleReq(&c.Hdr, b) }

// CmdQuerySRQResp is pvrdma_cmd_query_srq_resp.
type CmdQuerySRQResp struct {
	Hdr   CmdRespHdr
	Attrs SRQAttr
}

func (c *CmdQuerySRQResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	c.Attrs.Encode(b[16:])
}

func (c *CmdQuerySRQResp) Decode(b []byte) {
	_ = b[CmdQuerySRQRespSize-1]
	c.Hdr.Decode(b)
	c.Attrs.Decode(b[16:])
}

// CmdDestroySRQ is pvrdma_cmd_destroy_srq.
type CmdDestroySRQ struct {
	Hdr       CmdHdr
	SRQHandle uint32
}

func (*CmdDestroySRQ) Opcode() Opcode    { return OpDestroySRQ }
func (c *CmdDestroySRQ) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.SRQHandle, b) }
func (c *CmdDestroySRQ) Decode(b []byte) { c.SRQHandle = decodeHandleReq(&c.Hdr, b) }

// CmdCreateQP is pvrdma_cmd_create_qp.
type CmdCreateQP struct {
	Hdr           CmdHdr
	PdirDMA       uint64
	PDHandle      uint32
	SendCQHandle  uint32
	RecvCQHandle  uint32
	SRQHandle     uint32
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	LKey          uint32
	AccessFlags   uint32
	TotalChunks   uint16 // pages: ring state, SQ, RQ
	SendChunks    uint16 // SQ pages
	MaxAtomicArg  uint16
	SQSigAll      uint8
	QPType        uint8 // QPType*
	IsSRQ         uint8
}

func (*CmdCreateQP) Opcode() Opcode { return OpCreateQP }

func (c *CmdCreateQP) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint64(b[16:], c.PdirDMA)
	for i, v := range [...]uint32{c.PDHandle, c.SendCQHandle, c.RecvCQHandle, c.SRQHandle,
		c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData, c.LKey, c.AccessFlags} {
		le.PutUint32(b[24+4*i:], v)
	}
	le.PutUint16(b[68:], c.TotalChunks)
	le.PutUint16(b[70:], c.SendChunks)
	le.PutUint16(b[72:], c.MaxAtomicArg)
	b[74], b[75], b[76] = c.SQSigAll, c.QPType, c.IsSRQ
	clear(b[77:CmdCreateQPSize])
}

func (c *CmdCreateQP) Decode(b []byte) {
	_ = b[CmdCreateQPSize-1]
	c.Hdr.Decode(b)
	c.PdirDMA = le.Uint64(b[16:])
	c.PDHandle, c.SendCQHandle, c.RecvCQHandle, c.SRQHandle = le.Uint32(b[24:]), le.Uint32(b[28:]), le.Uint32(b[32:]), le.Uint32(b[36:])
	c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE = le.Uint32(b[40:]), le.Uint32(b[44:]), le.Uint32(b[48:]), le.Uint32(b[52:])
	c.MaxInlineData, c.LKey, c.AccessFlags = le.Uint32(b[56:]), le.Uint32(b[60:]), le.Uint32(b[64:])
	c.TotalChunks, c.SendChunks, c.MaxAtomicArg = le.Uint16(b[68:]), le.Uint16(b[70:]), le.Uint16(b[72:])
	c.SQSigAll, c.QPType, c.IsSRQ = b[74], b[75], b[76]
}

// CmdCreateQPResp is pvrdma_cmd_create_qp_resp_v2, the CREATE_QP response
// of devices at VersionQPHandle and later (the v1 layout has no QPHandle).
type CmdCreateQPResp struct {
	Hdr           CmdRespHdr
	QPN           uint32
	QPHandle      uint32
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

func (c *CmdCreateQPResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	for i, v := range [...]uint32{c.QPN, c.QPHandle, c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData, 0} {
		le.PutUint32(b[16+4*i:], v)
	}
}

func (c *CmdCreateQPResp) Decode(b []byte) {
	_ = b[CmdCreateQPRespSize-1]
	c.Hdr.Decode(b)
	c.QPN, c.QPHandle = le.Uint32(b[16:]), le.Uint32(b[20:])
	c.MaxSendWR, c.MaxRecvWR = le.Uint32(b[24:]), le.Uint32(b[28:])
	c.MaxSendSGE, c.MaxRecvSGE = le.Uint32(b[32:]), le.Uint32(b[36:])
	c.MaxInlineData = le.Uint32(b[40:])
}

// CmdModifyQP is pvrdma_cmd_modify_qp.
type CmdModifyQP struct {
	Hdr      CmdHdr
	QPHandle uint32
	AttrMask uint32 // Attr* bits
	Attrs    QPAttr
}

func (*CmdModifyQP) Opcode() Opcode { return OpModifyQP }

func (c *CmdModifyQP) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.QPHandle)
	le.PutUint32(b[20:], c.AttrMask)
	c.Attrs.Encode(b[24:])
}

func (c *CmdModifyQP) Decode(b []byte) {
	_ = b[CmdModifyQPSize-1]
	c.Hdr.Decode(b)
	c.QPHandle, c.AttrMask = le.Uint32(b[16:]), le.Uint32(b[20:])
	c.Attrs.Decode(b[24:])
}

// CmdQueryQP is pvrdma_cmd_query_qp.
type CmdQueryQP struct {
	Hdr      CmdHdr
	QPHandle uint32
	AttrMask uint32 // a hint: the device answers every attribute
}

func (*CmdQueryQP) Opcode() Opcode { return OpQueryQP }

func (c *CmdQueryQP) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.QPHandle)
	le.PutUint32(b[20:], c.AttrMask)
}

func (c *CmdQueryQP) Decode(b []byte) {
	_ = b[CmdQueryQPSize-1]
	c.Hdr.Decode(b)
	c.QPHandle, c.AttrMask = le.Uint32(b[16:]), le.Uint32(b[20:])
}

// CmdQueryQPResp is pvrdma_cmd_query_qp_resp.
type CmdQueryQPResp struct {
	Hdr   CmdRespHdr
	Attrs QPAttr
}

func (c *CmdQueryQPResp) Encode(b []byte) {
	c.Hdr.Encode(b)
	c.Attrs.Encode(b[16:])
}

func (c *CmdQueryQPResp) Decode(b []byte) {
	_ = b[CmdQueryQPRespSize-1]
	c.Hdr.Decode(b)
	c.Attrs.Decode(b[16:])
}

// CmdDestroyQP is pvrdma_cmd_destroy_qp.
type CmdDestroyQP struct {
	Hdr      CmdHdr
	QPHandle uint32
}

func (*CmdDestroyQP) Opcode() Opcode    { return OpDestroyQP }
func (c *CmdDestroyQP) Encode(b []byte) { encodeHandleReq(&c.Hdr, c.QPHandle, b) }
func (c *CmdDestroyQP) Decode(b []byte) { c.QPHandle = decodeHandleReq(&c.Hdr, b) }

// CmdDestroyQPResp is pvrdma_cmd_destroy_qp_resp.
type CmdDestroyQPResp struct {
	Hdr            CmdRespHdr
	EventsReported uint32
}

func (c *CmdDestroyQPResp) Encode(b []byte) { encodeHandleResp(&c.Hdr, c.EventsReported, b) }
func (c *CmdDestroyQPResp) Decode(b []byte) { c.EventsReported = decodeHandleResp(&c.Hdr, b) }

// CmdCreateBind is pvrdma_cmd_create_bind: install a GID table entry.
type CmdCreateBind struct {
	Hdr     CmdHdr
	MTU     uint32
	VLAN    uint32
	Index   uint32
	NewGID  [16]byte
	GIDType uint8 // GIDTypeFlag*
}

func (*CmdCreateBind) Opcode() Opcode { return OpCreateBind }

func (c *CmdCreateBind) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.MTU)
	le.PutUint32(b[20:], c.VLAN)
	le.PutUint32(b[24:], c.Index)
	copy(b[28:44], c.NewGID[:])
	b[44], b[45], b[46], b[47] = c.GIDType, 0, 0, 0
}

func (c *CmdCreateBind) Decode(b []byte) {
	_ = b[CmdCreateBindSize-1]
	c.Hdr.Decode(b)
	c.MTU, c.VLAN, c.Index = le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:])
	copy(c.NewGID[:], b[28:44])
	c.GIDType = b[44]
}

// CmdDestroyBind is pvrdma_cmd_destroy_bind: remove a GID table entry.
type CmdDestroyBind struct {
	Hdr     CmdHdr
	Index   uint32
	DestGID [16]byte
}

func (*CmdDestroyBind) Opcode() Opcode { return OpDestroyBind }

func (c *CmdDestroyBind) Encode(b []byte) {
	c.Hdr.Encode(b)
	le.PutUint32(b[16:], c.Index)
	copy(b[20:36], c.DestGID[:])
	le.PutUint32(b[36:], 0)
}

func (c *CmdDestroyBind) Decode(b []byte) {
	_ = b[CmdDestroyBindSize-1]
	c.Hdr.Decode(b)
	c.Index = le.Uint32(b[16:])
	copy(c.DestGID[:], b[20:36])
}

// CmdRespHdrOnly is the response of the commands whose response is the
// header alone (the *_RESP_NOOP ones, MODIFY_QP, MODIFY_SRQ, DESTROY_SRQ).
type CmdRespHdrOnly struct {
	Hdr CmdRespHdr
}

func (c *CmdRespHdrOnly) Encode(b []byte) { c.Hdr.Encode(b) }
func (c *CmdRespHdrOnly) Decode(b []byte) { c.Hdr.Decode(b) }

// NewRequest returns a zero request structure for op, or nil for an
// opcode the ABI does not have.
func NewRequest(op Opcode) Request {
	switch op {
	case OpQueryPort:
		return &CmdQueryPort{}
	case OpQueryPKey:
		return &CmdQueryPKey{}
	case OpCreatePD:
		return &CmdCreatePD{}
	case OpDestroyPD:
		return &CmdDestroyPD{}
	case OpCreateMR:
		return &CmdCreateMR{}
	case OpDestroyMR:
		return &CmdDestroyMR{}
	case OpCreateCQ:
		return &CmdCreateCQ{}
	case OpResizeCQ:
		return &CmdResizeCQ{}
	case OpDestroyCQ:
		return &CmdDestroyCQ{}
	case OpCreateQP:
		return &CmdCreateQP{}
	case OpModifyQP:
		return &CmdModifyQP{}
	case OpQueryQP:
		return &CmdQueryQP{}
	case OpDestroyQP:
		return &CmdDestroyQP{}
	case OpCreateUC:
		return &CmdCreateUC{}
	case OpDestroyUC:
		return &CmdDestroyUC{}
	case OpCreateBind:
		return &CmdCreateBind{}
	case OpDestroyBind:
		return &CmdDestroyBind{}
	case OpCreateSRQ:
		return &CmdCreateSRQ{}
	case OpModifySRQ:
		return &CmdModifySRQ{}
	case OpQuerySRQ:
		return &CmdQuerySRQ{}
	case OpDestroySRQ:
		return &CmdDestroySRQ{}
	}
	return nil
}
