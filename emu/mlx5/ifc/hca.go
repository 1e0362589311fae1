package ifc

// The PRM layouts of the commands that bring the function up and down
// (mlx5_ifc.h): each input and output as a table of Fields named
// <struct>.<field> after the header (query_hca_cap_in.op_mod is
// QueryHCACapInOpMod). Offsets are in bits from the structure's start;
// every input starts with the mbox_in header (opcode, uid, op_mod) and
// every output with mbox_out (status, syndrome), which MboxIn* and
// MboxOut* read.

// The least length of each command's input and output: the end of the
// last field the device reads or writes, never the structure's size in one
// version of the header. Drivers of other versions send other sizes
// (6.12's enable_hca_out is 12 bytes, later ones 16); firmware answers
// them all, and so does the device.
const (
	EnableHCAInSize         = 0x10
	EnableHCAOutSize        = 0x08
	DisableHCAInSize        = 0x10
	DisableHCAOutSize       = 0x08
	TeardownHCAInSize       = 0x10
	TeardownHCAOutSize      = 0x10
	QueryISSIInSize         = 0x10
	QueryISSIOutSize        = 0x70
	SetISSIInSize           = 0x10
	SetISSIOutSize          = 0x08
	QueryPagesInSize        = 0x10
	QueryPagesOutSize       = 0x10
	QueryHCACapInSize       = 0x10
	QueryHCACapOutSize      = 0x1010
	SetHCACapInSize         = 0x1010
	SetHCACapOutSize        = 0x08
	InitHCAInSize           = 0x10 // the header: sw_vhca_id and sw_owner_id are optional
	InitHCAOutSize          = 0x08
	SetDriverVersionInSize  = 0x50
	SetDriverVersionOutSize = 0x08
	QueryAdapterInSize      = 0x10
	QueryAdapterOutSize     = 0x110
	AccessRegisterInSize    = 0x10 // access_register_in without register_data
	AccessRegisterOutSize   = 0x10
	AllocUAROutSize         = 0x0c
	AllocUARInSize          = 0x10
	DeallocUARInSize        = 0x10
	DeallocUAROutSize       = 0x08
	CreateEQInSize          = 0x110 // create_eq_in without pas[]
	CreateEQOutSize         = 0x0c
	DestroyEQInSize         = 0x10
	DestroyEQOutSize        = 0x08
)

// enable_hca_in, disable_hca_in (the same layout).
var (
	EnableHCAInEmbeddedCPUFunction  = F(0x40, 1)
	EnableHCAInFunctionID           = F(0x50, 0x10)
	DisableHCAInEmbeddedCPUFunction = F(0x40, 1)
	DisableHCAInFunctionID          = F(0x50, 0x10)
)

// teardown_hca_in, teardown_hca_out.
var (
	TeardownHCAInProfile = F(0x50, 0x10)
	TeardownHCAOutState  = F(0x7f, 1)
)

// Teardown profiles (MLX5_TEARDOWN_HCA_IN_PROFILE_*).
const (
	TeardownGracefulClose       = 0x0
	TeardownForceClose          = 0x1
	TeardownPrepareFastTeardown = 0x2
)

// query_issi_out, set_issi_in.
var (
	QueryISSIOutCurrentISSI      = F(0x50, 0x10)
	QueryISSIOutSupportedISSIDw0 = F(0x360, 0x20)
	SetISSIInCurrentISSI         = F(0x50, 0x10)
)

// query_pages_in, query_pages_out.
var (
	QueryPagesInEmbeddedCPUFunction  = F(0x40, 1)
	QueryPagesInFunctionID           = F(0x50, 0x10)
	QueryPagesOutEmbeddedCPUFunction = F(0x40, 1)
	QueryPagesOutFunctionID          = F(0x50, 0x10)
	QueryPagesOutNumPages            = F(0x60, 0x20)
)

// query_pages_in.op_mod (MLX5_{BOOT,INIT,POST_INIT}_PAGES).
const (
	BootPages     = 1
	InitPages     = 2
	PostInitPages = 3
)

// query_hca_cap_in, query_hca_cap_out, set_hca_cap_in.
var (
	QueryHCACapInOtherFunction = F(0x40, 1)
	QueryHCACapInFunctionID    = F(0x50, 0x10)
	QueryHCACapOutCapability   = F(0x80, 0x8000)
	SetHCACapInOtherFunction   = F(0x40, 1)
	SetHCACapInFunctionID      = F(0x50, 0x10)
	SetHCACapInCapability      = F(0x80, 0x8000)
)

// HCACapSize is the capability union (hca_cap_union, 4 KiB).
const HCACapSize = 0x1000

// Capability types: query_hca_cap_in.op_mod is type<<1 | mode
// (enum mlx5_cap_type; HCA_CAP_OPMOD_GET_MAX = 0, GET_CUR = 1), and
// set_hca_cap_in.op_mod is type<<1 (MLX5_SET_HCA_CAP_OP_MOD_*).
const (
	CapGeneral = 0x0
	CapAtomic  = 0x3
	CapModeMax = 0
	CapModeCur = 1
)

// cmd_hca_cap: the general device capabilities (spec §4.2), the fields
// the device reports or the driver writes.
var (
	CmdHCACapPageRequestDisable          = F(0x06, 1)
	CmdHCACapHCACap2                     = F(0x20, 1)
	CmdHCACapLogMaxSRQSz                 = F(0x80, 8)
	CmdHCACapLogMaxQPSz                  = F(0x88, 8)
	CmdHCACapLogMaxQP                    = F(0x9b, 5)
	CmdHCACapLogMaxSRQ                   = F(0xab, 5)
	CmdHCACapLogMaxCQSz                  = F(0xc8, 8)
	CmdHCACapLogMaxCQ                    = F(0xdb, 5)
	CmdHCACapLogMaxEQSz                  = F(0xe0, 8)
	CmdHCACapLogMaxMkey                  = F(0xea, 6)
	CmdHCACapLogMaxEQ                    = F(0xfc, 4)
	CmdHCACapLogMaxKLMListSize           = F(0x11a, 6)
	CmdHCACapLogMaxRaReqQP               = F(0x14a, 6)
	CmdHCACapLogMaxRaResQP               = F(0x15a, 6)
	CmdHCACapPkeyTableSize               = F(0x190, 0x10)
	CmdHCACapLocalCAAckDelay             = F(0x1ab, 5)
	CmdHCACapPortType                    = F(0x1b6, 2)
	CmdHCACapNumPorts                    = F(0x1b8, 8)
	CmdHCACapLogMaxMsg                   = F(0x1c3, 5)
	CmdHCACapStatRateSupport             = F(0x1e0, 0x10)
	CmdHCACapCQEVersion                  = F(0x1fc, 4)
	CmdHCACapUMRModifyEntitySizeDisabled = F(0x207, 1)
	CmdHCACapCmdifChecksum               = F(0x210, 2)
	CmdHCACapDCT                         = F(0x21a, 1)
	CmdHCACapRoCE                        = F(0x21d, 1)
	CmdHCACapAtomic                      = F(0x21e, 1)
	CmdHCACapCQResize                    = F(0x221, 1)
	CmdHCACapImaicl                      = F(0x231, 1)
	CmdHCACapXRC                         = F(0x23c, 1)
	CmdHCACapUD                          = F(0x23d, 1)
	CmdHCACapUC                          = F(0x23e, 1)
	CmdHCACapRC                          = F(0x23f, 1)
	CmdHCACapLogPgSz                     = F(0x258, 8)
	CmdHCACapBF                          = F(0x260, 1)
	CmdHCACapDriverVersion               = F(0x261, 1)
	CmdHCACapLogBFRegSize                = F(0x26b, 5)
	CmdHCACapMaxWQESzSQ                  = F(0x290, 0x10)
	CmdHCACapMaxWQESzRQ                  = F(0x2b0, 0x10)
	CmdHCACapMaxQPMcg                    = F(0x2e7, 0x19)
	CmdHCACapLogMaxMcg                   = F(0x318, 8)
	CmdHCACapLogMaxPD                    = F(0x32b, 5)
	CmdHCACapLogMaxXRCD                  = F(0x33b, 5)
	CmdHCACapLogMaxRMP                   = F(0x383, 5)
	CmdHCACapLogMaxUctx                  = F(0x463, 5)
	CmdHCACapMaxNumEQs                   = F(0x470, 0x10)
	CmdHCACapLogUARPageSz                = F(0x490, 0x10)
	CmdHCACapDeviceFrequencyKHz          = F(0x4e0, 0x20)
)

// CmdHCACapSize is sizeof cmd_hca_cap (the first part of the union).
const CmdHCACapSize = 0x100

// atomic_caps (spec §4.4).
var (
	AtomicCapsAtomicReq8BEndiannessMode           = F(0x40, 2)
	AtomicCapsSupportedAtomicReq8BEndiannessMode1 = F(0x46, 1)
	AtomicCapsAtomicOperations                    = F(0x90, 0x10)
	AtomicCapsAtomicSizeQP                        = F(0xb0, 0x10)
	AtomicCapsAtomicSizeDC                        = F(0xd0, 0x10)
)

// Atomic request endianness modes (MLX5_ATOMIC_REQ_MODE_*).
const (
	AtomicReqModeBE   = 0
	AtomicReqModeHost = 1
)

// init_hca_in.
var (
	InitHCAInSwVhcaID  = F(0x62, 0xe)
	InitHCAInSwOwnerID = F(0x80, 0x80)
)

// set_driver_version_in.
var SetDriverVersionInDriverVersion = F(0x80, 0x200)

// query_adapter_out.query_adapter_struct (query_adapter_param_block at
// bit 0x80 of the output).
var (
	QueryAdapterOutIEEEVendorID = F(0x80+0xc8, 0x18)
	QueryAdapterOutVSDVendorID  = F(0x80+0xf0, 0x10)
	QueryAdapterOutVSD          = F(0x80+0x100, 208*8)
	QueryAdapterOutVSDContdPSID = F(0x80+0x780, 16*8)
)

// access_register_in, access_register_out.
var (
	AccessRegisterInRegisterID = F(0x50, 0x10)
	AccessRegisterInArgument   = F(0x60, 0x20)
)

// AccessRegisterData is where register_data starts in both the input and
// the output (byte 0x10).
const AccessRegisterData = 0x10

// access_register_in.op_mod (MLX5_ACCESS_REG_SUMMARY_CTRL_ID_* in the
// driver's terms: mlx5_core_access_reg sets op_mod = !write).
const (
	RegWrite = 0
	RegRead  = 1
)

// Register IDs (enum MLX5_REG_*) the IB personality reaches (spec
// Appendix B) and the ones it does not.
const (
	RegQCAM           = 0x4019
	RegPCAP           = 0x5001
	RegPMTU           = 0x5003
	RegPTYS           = 0x5004
	RegPAOS           = 0x5006
	RegPVLC           = 0x500f
	RegPCAM           = 0x507f
	RegNodeDesc       = 0x6001
	RegHostEndianness = 0x7004
	RegMCAM           = 0x907f
	RegDTOR           = 0xc00e
)

// Register layouts: the size of each register the device implements and
// its fields (pcap_reg; mlx5_reg_host_endianness is 16 bytes, he in byte
// 0; the node description is 64 bytes of text).
const (
	PCAPRegSize           = 0x14
	HostEndiannessRegSize = 0x10
	NodeDescRegSize       = 0x40
)

// pcap_reg: the PCAP register's data (port capability mask).
var (
	PCAPRegLocalPort          = F(0x08, 8)
	PCAPRegPortCapabilityMask = F(0x20, 0x20) // port_capability_mask[0]
)

// alloc_uar_out, dealloc_uar_in.
var (
	AllocUAROutUAR  = F(0x48, 0x18)
	DeallocUARInUAR = F(0x48, 0x18)
)

// create_eq_in, create_eq_out, destroy_eq_in.
var (
	CreateEQInEQContextEntry = F(0x80, 0x200)
	CreateEQOutEQNumber      = F(0x58, 8)
	DestroyEQInEQNumber      = F(0x58, 8)
)

// CreateEQInEventBitmask is event_bitmask[i] (four 64-bit words; bit n of
// word 0 is event type n).
func CreateEQInEventBitmask(i int) Field { return Field{0x2c0 + uint32(i)*64, 64} }

// CreateEQInPAS is where pas[] starts (byte 0x110): one big-endian 64-bit
// address per page of the EQ buffer.
const CreateEQInPAS = 0x110

// eqc, the EQ context (eq_context_entry), offsets from its start.
var (
	EQCStatus          = F(0x00, 4)
	EQCEC              = F(0x0d, 1)
	EQCOI              = F(0x0e, 1)
	EQCSt              = F(0x14, 4)
	EQCPageOffset      = F(0x54, 6)
	EQCLogEQSize       = F(0x63, 5)
	EQCUARPage         = F(0x68, 0x18)
	EQCIntr            = F(0xb4, 0xc)
	EQCLogPageSize     = F(0xc3, 5)
	EQCConsumerCounter = F(0x148, 0x18)
	EQCProducerCounter = F(0x168, 0x18)
)

// EQCSize is sizeof eqc.
const EQCSize = 0x40

// Event types (enum mlx5_event): the EQE's type and the bit of
// event_bitmask that subscribes an EQ to it.
const (
	EventComp            = 0x00
	EventWQCatasError    = 0x05 // a QP's work queue unreadable (IB_EVENT_QP_FATAL)
	EventPortChange      = 0x09
	EventCmd             = 0x0a
	EventPageRequest     = 0x0b
	EventWQInvalReqError = 0x10 // IB_EVENT_QP_REQ_ERR
	EventWQAccessError   = 0x11 // IB_EVENT_QP_ACCESS_ERR
	EventSRQRQLimit      = 0x14 // an SRQ's WQEs fell below its limit (IB_EVENT_SRQ_LIMIT_REACHED)
	EventTypeMax         = 0x100
)

// The EQE (struct mlx5_eqe, 64 bytes): byte offsets.
const (
	EQESize      = 64
	EQEType      = 0x01
	EQESubType   = 0x03
	EQEData      = 0x20 // data.cmd.vector is a big-endian u32 here
	EQESignature = 0x3e
	EQEOwner     = 0x3f
	// LogEQEStride is log2 of EQESize.
	LogEQEStride = 6
)

// The EQ doorbells in a UAR page (core/lib/eq.h: eq_update_ci): a 32-bit
// big-endian write of eqn<<24 | (consumer index & 0xffffff).
const (
	UAREQDoorbellArm   = 0x40 // update CI and arm
	UAREQDoorbellNoArm = 0x48 // update CI only
	EQDoorbellCIMask   = 0xffffff
	EQDoorbellEQNShift = 24
)

// AdapterPageShift is MLX5_ADAPTER_PAGE_SHIFT: PAS pages are 4 KiB <<
// log_page_size.
const AdapterPageShift = 12

// mad_ifc_in, mad_ifc_out: a MAD for the port's own agents (the SMA
// answering NodeInfo, PortInfo, GUIDInfo, P_KeyTable, NodeDescription),
// 256 bytes each way after the 16-byte header.
const (
	MadIfcInSize  = 0x110
	MadIfcOutSize = 0x110
	MadIfcMADOff  = 0x10 // mad, response_mad_packet: byte offset
	MadIfcMADSize = 0x100
)

// mad_ifc_in (the MAD itself at MadIfcMADOff, in the output too).
var (
	MadIfcInRemoteLID = F(0x40, 0x10)
	MadIfcInPort      = F(0x58, 0x08)
)

// mad_ifc_in.op_mod bits: the driver's (MLX5_MAD_IFC_IGNORE_MKEY,
// MLX5_MAD_IFC_IGNORE_BKEY).
const (
	MadIfcIgnoreMKey = 1 << 0
	MadIfcIgnoreBKey = 1 << 1
)
