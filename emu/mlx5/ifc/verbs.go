package ifc

// The PRM layouts of the verbs half of Stage 1 (mlx5_ifc.h as Linux 6.12
// has it; spec §5.4.1, §6): protection domains, XRC domains, memory keys
// and their context (mkc), CQs (cqc), QPs (qpc with its address paths),
// the QP state transitions and QUERY_QP, RMPs (rmpc with its wq), XRC
// SRQs (xrc_srqc), and the HCA vport context. Offsets are bits from the
// start of the structure named; a context's fields are relative to the
// context (CreateQPInQPC.Off + QPCPD.Off is create_qp_in.qpc.pd).

// The least lengths of the verbs commands: the end of the last field the
// device reads or writes (see hca.go), never a header's sizeof. The
// structure sizes Linux 6.12 sends are larger (mlx5test uses them).
const (
	AllocPDInSize                 = 0x08 // the header: nothing to read
	AllocPDOutSize                = 0x0c
	DeallocPDInSize               = 0x0c
	DeallocPDOutSize              = 0x08
	AllocXRCDInSize               = 0x08
	AllocXRCDOutSize              = 0x0c
	DeallocXRCDInSize             = 0x0c
	DeallocXRCDOutSize            = 0x08
	CreateMkeyInSize              = 0x64 // through translations_octword_actual_size; the MTT follows at 0x110
	CreateMkeyOutSize             = 0x0c
	DestroyMkeyInSize             = 0x0c
	DestroyMkeyOutSize            = 0x08
	CreateCQInSize                = 0x50 // through the cq context; pas[] at 0x110 when the CQ needs it
	CreateCQOutSize               = 0x0c
	DestroyCQInSize               = 0x0c
	DestroyCQOutSize              = 0x08
	CreateQPInSize                = 0x100 // through the qpc; pas[] at 0x110 when the QP has a buffer
	CreateQPOutSize               = 0x0c
	ModifyQPInSize                = 0x100 // rst2init/init2rtr/rtr2rts_qp_in through the qpc
	ModifyQPOutSize               = 0x08
	QP2RstInSize                  = 0x0c
	QP2RstOutSize                 = 0x08
	QP2ErrInSize                  = 0x0c
	QP2ErrOutSize                 = 0x08
	AttachToMCGInSize             = 0x20 // through multicast_gid
	AttachToMCGOutSize            = 0x08
	DetachFromMCGInSize           = 0x20
	DetachFromMCGOutSize          = 0x08
	QueryQPInSize                 = 0x0c
	QueryQPOutSize                = 0x100 // through the qpc
	DestroyQPInSize               = 0x0c
	DestroyQPOutSize              = 0x08
	CreateRMPInSize               = 0x74 // through rmpc.wq.log_wq_sz's word; pas[] at 0x110
	CreateRMPOutSize              = 0x0c
	DestroyRMPInSize              = 0x0c
	DestroyRMPOutSize             = 0x08
	CreateXRCSRQInSize            = 0x40 // through xrc_srqc.db_record_addr; pas[] at 0x110
	CreateXRCSRQOutSize           = 0x0c
	DestroyXRCSRQInSize           = 0x0c
	DestroyXRCSRQOutSize          = 0x08
	QueryHCAVportContextInSize    = 0x0c
	QueryHCAVportContextOutSize   = 0x78 // through hca_vport_context.sm_sl's word
	PASOffset                     = 0x110
	QPCSize                       = 0xe8 // sizeof qpc (0x740 bits)
	MkcSize                       = 0x40
	CQCSize                       = 0x40
	HCAVportContextSize           = 0x200
	Linux612CmdSize               = 0x10  // alloc_pd_in/out and the other 16-byte structures
	Linux612CreateMkeyInSize      = 0x110 // create_mkey_in without klm_pas_mtt[]
	Linux612CreateCQInSize        = 0x110 // create_cq_in without pas[]
	Linux612CreateQPInSize        = 0x110 // create_qp_in without pas[]
	Linux612ModifyQPInSize        = 0x110 // rst2init_qp_in and the others
	Linux612QueryQPOutSize        = 0x110 // query_qp_out without pas[]
	Linux612CreateRMPInSize       = 0x110 // create_rmp_in without pas[]
	Linux612CreateXRCSRQInSize    = 0x110 // create_xrc_srq_in without pas[]
	Linux612QueryHCAVportCtxOutSz = 0x210 // query_hca_vport_context_out
	Linux612MCGInSize             = 0x20  // attach_to_mcg_in, detach_from_mcg_in
)

// The object number every alloc/create output and every
// dealloc/destroy/modify/query input carries at byte 0x09 (24 bits):
// pd, xrcd, mkey_index, cqn, qpn, rmpn, xrc_srqn.
var (
	ObjIn  = F(0x48, 0x18)
	ObjOut = F(0x48, 0x18)
)

// attach_to_mcg_in and detach_from_mcg_in: the QP (ObjIn, the qpn at
// byte 0x09) and the group's GID (spec §6.8; the LID ib_attach_mcast
// takes is not sent).
var MCGInMulticastGID = F(0x80, 0x80)

// create_mkey_in and its mkey context (mkc, at memory_key_mkey_entry).
var (
	CreateMkeyInPgAccess                      = F(0x60, 1)
	CreateMkeyInMkc                           = F(0x80, 0x200)
	CreateMkeyInTranslationsOctwordActualSize = F(0x300, 0x20)

	MkcFree                    = F(0x01, 1)
	MkcAccessMode42            = F(0x03, 3)
	MkcUMREn                   = F(0x10, 1)
	MkcA                       = F(0x11, 1)
	MkcRW                      = F(0x12, 1)
	MkcRR                      = F(0x13, 1)
	MkcLW                      = F(0x14, 1)
	MkcLR                      = F(0x15, 1)
	MkcAccessMode10            = F(0x16, 2)
	MkcQPN                     = F(0x20, 0x18)
	MkcMkey70                  = F(0x38, 8)
	MkcLength64                = F(0x60, 1)
	MkcEnRinval                = F(0x67, 1)
	MkcPD                      = F(0x68, 0x18)
	MkcStartAddr               = F(0x80, 0x40)
	MkcLen                     = F(0xc0, 0x40)
	MkcTranslationsOctwordSize = F(0x1a0, 0x20)
	MkcLogPageSize             = F(0x1db, 5)
)

// Memory key access modes (MLX5_MKC_ACCESS_MODE_*: access_mode_4_2 << 2 |
// access_mode_1_0).
const (
	MkcAccessModePA  = 0
	MkcAccessModeMTT = 1
	MkcAccessModeKLM = 2
	MkcAccessModeKSM = 3
)

// create_cq_in and its cq context (cqc).
var (
	CreateCQInCQC = F(0x80, 0x200)

	CQCCQESz      = F(0x08, 3)
	CQCOI         = F(0x0e, 1)
	CQCCQECompEn  = F(0x11, 1)
	CQCPageOffset = F(0x54, 6)
	CQCLogCQSize  = F(0x63, 5)
	CQCUARPage    = F(0x68, 0x18)
	CQCCEQN       = F(0xa0, 0x20) // c_eqn_or_apu_element
	CQCLogPageSz  = F(0xc3, 5)
	CQCDBRAddr    = F(0x1c0, 0x40)
)

// cqc.cqe_sz: 64- or 128-byte CQEs.
const (
	CQESize64  = 0
	CQESize128 = 1
)

// create_qp_in (the modify inputs and query_qp_out carry the qpc at the
// same place, with opt_param_mask before it).
var (
	CreateQPInInputQPN = F(0x48, 0x18)
	QPInOptParamMask   = F(0x80, 0x20)
	QPInQPC            = F(0xc0, 0x740)
	QueryQPOutQPC      = F(0xc0, 0x740)
)

// qpc, the QP context.
var (
	QPCState         = F(0x00, 4)
	QPCSt            = F(0x08, 8)
	QPCPMState       = F(0x13, 2)
	QPCBlockLbMc     = F(0x21, 1)
	QPCPD            = F(0x28, 0x18)
	QPCMTU           = F(0x40, 3)
	QPCLogMsgMax     = F(0x43, 5)
	QPCLogRQSize     = F(0x49, 4)
	QPCLogRQStride   = F(0x4d, 3)
	QPCNoSQ          = F(0x50, 1)
	QPCLogSQSize     = F(0x51, 4)
	QPCCounterSetID  = F(0x60, 8)
	QPCUARPage       = F(0x68, 0x18)
	QPCUserIndex     = F(0x88, 0x18)
	QPCLogPageSize   = F(0xa3, 5)
	QPCRemoteQPN     = F(0xa8, 0x18)
	QPCPriPath       = F(0xc0, 0x160)
	QPCAltPath       = F(0x220, 0x160)
	QPCLogAckReqFreq = F(0x380, 4)
	QPCLogSRAMax     = F(0x388, 3)
	QPCFre           = F(0x394, 1) // fast registration enabled (the kernel sets it on its QPs)
	QPCRetryCount    = F(0x38d, 3)
	QPCRNRRetry      = F(0x390, 3)
	QPCNextSendPSN   = F(0x3c8, 0x18)
	QPCCQNSnd        = F(0x3e8, 0x18)
	QPCLogRRAMax     = F(0x488, 3)
	QPCAtomicMode    = F(0x48c, 4)
	QPCRRE           = F(0x490, 1)
	QPCRWE           = F(0x491, 1)
	QPCRAE           = F(0x492, 1)
	QPCPageOffset    = F(0x494, 6)
	QPCMinRNRNak     = F(0x4a3, 5)
	QPCNextRcvPSN    = F(0x4a8, 0x18)
	QPCXRCD          = F(0x4c8, 0x18)
	QPCCQNRcv        = F(0x4e8, 0x18)
	QPCDBRAddr       = F(0x500, 0x40)
	QPCQKey          = F(0x540, 0x20)
	QPCRQType        = F(0x565, 3)
	QPCSRQN          = F(0x568, 0x18) // srqn_rmpn_xrqn
	QPCHWSQCounter   = F(0x5a0, 0x10) // hw_sq_wqebb_counter
	QPCSWSQCounter   = F(0x5b0, 0x10)
	QPCHWRQCounter   = F(0x5c0, 0x20)
	QPCSWRQCounter   = F(0x5e0, 0x20)
)

// ads, an address path (qpc.primary_address_path and
// secondary_address_path), offsets from the path's start.
var (
	ADSPKeyIndex    = F(0x10, 0x10)
	ADSGRH          = F(0x28, 1)
	ADSMLID         = F(0x29, 7)
	ADSRLID         = F(0x30, 0x10)
	ADSAckTimeout   = F(0x40, 5)
	ADSSrcAddrIndex = F(0x48, 8)
	ADSStatRate     = F(0x54, 4)
	ADSHopLimit     = F(0x58, 8)
	ADSTClass       = F(0x64, 8)
	ADSFlowLabel    = F(0x6c, 0x14)
	ADSRGIDRIP      = F(0x80, 0x80)
	ADSDSCP         = F(0x10a, 6)
	ADSUDPSport     = F(0x110, 0x10)
	ADSEthPrio      = F(0x121, 3)
	ADSSL           = F(0x124, 4)
	ADSVhcaPortNum  = F(0x128, 8)
	ADSRMAC4732     = F(0x130, 0x10)
	ADSRMAC310      = F(0x140, 0x20)
)

// PriPath is the primary address path's field f, in the qpc.
func PriPath(f Field) Field { return Field{QPCPriPath.Off + f.Off, f.Width} }

// AltPath is the secondary address path's field f, in the qpc.
func AltPath(f Field) Field { return Field{QPCAltPath.Off + f.Off, f.Width} }

// QP service types (qpc.st, include/linux/mlx5/qp.h: MLX5_QP_ST_*).
const (
	QPStRC     = 0x0
	QPStUC     = 0x1
	QPStUD     = 0x2
	QPStXRC    = 0x3
	QPStMLX    = 0x4
	QPStDCI    = 0x5
	QPStQP0    = 0x7
	QPStQP1    = 0x8
	QPStRawEth = 0x9
	QPStRegUMR = 0xc
)

// QP states (qpc.state, enum mlx5_qp_state).
const (
	QPStateRST        = 0
	QPStateINIT       = 1
	QPStateRTR        = 2
	QPStateRTS        = 3
	QPStateSQER       = 4
	QPStateSQD        = 5
	QPStateERR        = 6
	QPStateSQDraining = 7
	NumQPStates       = 8
)

// SendWQEBB is the SQ's basic block: log_sq_size counts them.
const SendWQEBB = 64

// qpc.rq_type (MLX5_NON_ZERO_RQ, MLX5_SRQ_RQ, MLX5_CRQ_RQ,
// MLX5_ZERO_LEN_RQ).
const (
	RQTypeRegular = 0
	RQTypeSRQ     = 1
	RQTypeCRQ     = 2
	RQTypeZeroLen = 3
)

// opt_param_mask bits (include/linux/mlx5/qp.h: enum mlx5_qp_optpar).
const (
	OptAltAddrPath  = 1 << 0
	OptRRE          = 1 << 1
	OptRAE          = 1 << 2
	OptRWE          = 1 << 3
	OptPKeyIndex    = 1 << 4
	OptQKey         = 1 << 5
	OptRNRTimeout   = 1 << 6
	OptPriAddrPath  = 1 << 7
	OptSRAMax       = 1 << 8
	OptRRAMax       = 1 << 9
	OptPMState      = 1 << 10
	OptRetryCount   = 1 << 12
	OptRNRRetry     = 1 << 13
	OptAckTimeout   = 1 << 14
	OptLagTxAff     = 1 << 15
	OptPriPort      = 1 << 16
	OptSRQN         = 1 << 18
	OptCQNRcv       = 1 << 19
	OptCounterSetID = 1 << 25
)

// create_rmp_in and its rmp context (rmpc, at ctx) with its wq.
var (
	CreateRMPInCtx = F(0x100, 0x780)

	RMPCState = F(0x08, 4)
	RMPCWQ    = F(0x180, 0x600)

	WQType       = F(0x00, 4)
	WQPageOffset = F(0x2b, 5)
	WQLWM        = F(0x30, 0x10)
	WQPD         = F(0x48, 0x18)
	WQDBRAddr    = F(0x80, 0x40)
	WQLogStride  = F(0x10c, 4)
	WQLogPgSz    = F(0x113, 5)
	WQLogSz      = F(0x11b, 5)
)

// RMP states (rmpc.state) and WQ types (wq.wq_type).
const (
	RMPStateRDY      = 1
	WQTypeLinkedList = 0
)

// RMPWQ is the rmpc.wq's field f in the rmpc.
func RMPWQ(f Field) Field { return Field{RMPCWQ.Off + f.Off, f.Width} }

// create_xrc_srq_in and its context (xrc_srqc, at xrc_srq_context_entry).
var (
	CreateXRCSRQInCtx = F(0x80, 0x200)

	XRCSRQCLogSize     = F(0x04, 4)
	XRCSRQCLogRQStride = F(0x25, 3)
	XRCSRQCXRCD        = F(0x28, 0x18)
	XRCSRQCPageOffset  = F(0x40, 6)
	XRCSRQCCQN         = F(0x48, 0x18)
	XRCSRQCLogPageSize = F(0x82, 6)
	XRCSRQCUserIndex   = F(0x88, 0x18)
	XRCSRQCPD          = F(0xc8, 0x18)
	XRCSRQCLWM         = F(0xe0, 0x10)
	XRCSRQCDBRAddrH    = F(0x140, 0x20)
	XRCSRQCDBRAddrL    = F(0x160, 0x20) // db_record_addr_l[0x1e] and 2 reserved bits: the address's low word
)

// query_hca_vport_context_in, and the hca_vport_context in its output.
var (
	QueryHCAVportContextInOtherVport  = F(0x40, 1)
	QueryHCAVportContextInPortNum     = F(0x4c, 4)
	QueryHCAVportContextInVportNumber = F(0x50, 0x10)
	QueryHCAVportContextOutCtx        = F(0x80, 0x1000)

	HCAVportHasSMI            = F(0x101, 1)
	HCAVportGRHRequired       = F(0x103, 1)
	HCAVportPortPhysicalState = F(0x110, 4)
	HCAVportPortState         = F(0x118, 4)
	HCAVportVportState        = F(0x11c, 4)
	HCAVportSystemImageGUID   = F(0x140, 0x40)
	HCAVportPortGUID          = F(0x180, 0x40)
	HCAVportNodeGUID          = F(0x1c0, 0x40)
	HCAVportCapMask1          = F(0x200, 0x20)
	HCAVportLID               = F(0x300, 0x10)
	HCAVportLMC               = F(0x318, 3)
	HCAVportSubnetTimeout     = F(0x31b, 5)
	HCAVportSMLID             = F(0x320, 0x10)
	HCAVportSMSL              = F(0x330, 4)
)

// At returns field f of a structure that starts at field at of its
// enclosing one (CreateQPInQPC and QPCPD give create_qp_in.qpc.pd).
func At(at, f Field) Field { return Field{at.Off + f.Off, f.Width} }

// modify_cq_in (MODIFY_CQ): the CQ (ObjIn, the cqn at byte 0x09),
// modify_field_select_resize_field_select, and a cq context and pas[] at
// create_cq_in's places (CreateCQInCQC, PASOffset). Only the resize
// (op_mod MLX5_CQ_OPMOD_RESIZE, spec §6.5): cq_moderation is 0.
var (
	ModifyCQInFieldSelect = F(0x60, 0x20)
	ModifyCQInCQC         = F(0x80, 0x200)
)

const (
	ModifyCQInSize         = 0x50 // through the cq context; pas[] at 0x110
	ModifyCQOutSize        = 0x08
	Linux612ModifyCQInSize = 0x110 // modify_cq_in without pas[]

	CQOpModResize = 1 // MLX5_CQ_OPMOD_RESIZE

	// resize_field_select (MLX5_MODIFY_CQ_MASK_*): what a resize changes.
	ModifyCQMaskLogSize  = 1 << 0
	ModifyCQMaskPgOffset = 1 << 1
	ModifyCQMaskPgSize   = 1 << 2
)

// modify_rmp_in (MODIFY_RMP: mlx5_ib arms an SRQ's limit with it) and
// query_rmp_in/out (QUERY_RMP): the RMP at ObjIn, the state it stays in
// (rmp_state), the bitmask of what changes (lwm only), and an rmpc at
// byte 0x20 of both the input and the output.
var (
	ModifyRMPInRMPState   = F(0x40, 4)
	ModifyRMPInBitmaskLWM = F(0xbf, 1)
	ModifyRMPInCtx        = F(0x100, 0x780)
	QueryRMPOutCtx        = F(0x100, 0x780)
)

const (
	ModifyRMPInSize         = 0x58 // through ctx.wq.lwm
	ModifyRMPOutSize        = 0x08
	QueryRMPInSize          = 0x0c
	QueryRMPOutSize         = 0x74 // through ctx.wq.log_wq_sz's word
	Linux612ModifyRMPInSize = 0x110
	Linux612QueryRMPOutSize = 0x110 // query_rmp_out without pas[]
)
