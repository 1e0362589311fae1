package ifc

import "slices"

// Opcode is a command opcode, the opcode field of the input header
// (include/linux/mlx5/mlx5_ifc.h: enum MLX5_CMD_OP_*).
type Opcode uint16

// Command opcodes (MLX5_CMD_OP_<NAME>), the ones the driver and its
// users issue; the spec's Appendix A says which stage needs each.
const (
	OpQueryHCACap            Opcode = 0x100
	OpQueryAdapter           Opcode = 0x101
	OpInitHCA                Opcode = 0x102
	OpTeardownHCA            Opcode = 0x103
	OpEnableHCA              Opcode = 0x104
	OpDisableHCA             Opcode = 0x105
	OpQueryPages             Opcode = 0x107
	OpManagePages            Opcode = 0x108
	OpSetHCACap              Opcode = 0x109
	OpQueryISSI              Opcode = 0x10a
	OpSetISSI                Opcode = 0x10b
	OpSetDriverVersion       Opcode = 0x10d
	OpCreateMkey             Opcode = 0x200
	OpQueryMkey              Opcode = 0x201
	OpDestroyMkey            Opcode = 0x202
	OpQuerySpecialContexts   Opcode = 0x203
	OpPageFaultResume        Opcode = 0x204
	OpCreateEQ               Opcode = 0x301
	OpDestroyEQ              Opcode = 0x302
	OpQueryEQ                Opcode = 0x303
	OpGenEQE                 Opcode = 0x304
	OpCreateCQ               Opcode = 0x400
	OpDestroyCQ              Opcode = 0x401
	OpQueryCQ                Opcode = 0x402
	OpModifyCQ               Opcode = 0x403
	OpCreateQP               Opcode = 0x500
	OpDestroyQP              Opcode = 0x501
	OpRst2InitQP             Opcode = 0x502
	OpInit2RTRQP             Opcode = 0x503
	OpRTR2RTSQP              Opcode = 0x504
	OpRTS2RTSQP              Opcode = 0x505
	OpSQErr2RTSQP            Opcode = 0x506
	Op2ErrQP                 Opcode = 0x507
	Op2RstQP                 Opcode = 0x50a
	OpQueryQP                Opcode = 0x50b
	OpSQDRTSQP               Opcode = 0x50c
	OpMADIfc                 Opcode = 0x50d
	OpInit2InitQP            Opcode = 0x50e
	OpCreatePSV              Opcode = 0x600
	OpDestroyPSV             Opcode = 0x601
	OpCreateSRQ              Opcode = 0x700
	OpDestroySRQ             Opcode = 0x701
	OpQuerySRQ               Opcode = 0x702
	OpArmRQ                  Opcode = 0x703
	OpCreateXRCSRQ           Opcode = 0x705
	OpDestroyXRCSRQ          Opcode = 0x706
	OpQueryXRCSRQ            Opcode = 0x707
	OpArmXRCSRQ              Opcode = 0x708
	OpCreateDCT              Opcode = 0x710
	OpDestroyDCT             Opcode = 0x711
	OpDrainDCT               Opcode = 0x712
	OpQueryDCT               Opcode = 0x713
	OpArmDCTForKeyViolation  Opcode = 0x714
	OpQueryVportState        Opcode = 0x750
	OpModifyVportState       Opcode = 0x751
	OpQueryESWVportContext   Opcode = 0x752
	OpModifyESWVportContext  Opcode = 0x753
	OpQueryNICVportContext   Opcode = 0x754
	OpModifyNICVportContext  Opcode = 0x755
	OpQueryRoCEAddress       Opcode = 0x760
	OpSetRoCEAddress         Opcode = 0x761
	OpQueryHCAVportContext   Opcode = 0x762
	OpModifyHCAVportContext  Opcode = 0x763
	OpQueryHCAVportGID       Opcode = 0x764
	OpQueryHCAVportPKey      Opcode = 0x765
	OpQueryVportCounter      Opcode = 0x770
	OpAllocQCounter          Opcode = 0x771
	OpDeallocQCounter        Opcode = 0x772
	OpQueryQCounter          Opcode = 0x773
	OpAllocPD                Opcode = 0x800
	OpDeallocPD              Opcode = 0x801
	OpAllocUAR               Opcode = 0x802
	OpDeallocUAR             Opcode = 0x803
	OpConfigIntModeration    Opcode = 0x804
	OpAccessReg              Opcode = 0x805
	OpAttachToMCG            Opcode = 0x806
	OpDetachFromMCG          Opcode = 0x807
	OpGetDroppedPacketLog    Opcode = 0x80a
	OpQueryMADDemux          Opcode = 0x80b
	OpSetMADDemux            Opcode = 0x80c
	OpNop                    Opcode = 0x80d
	OpAllocXRCD              Opcode = 0x80e
	OpDeallocXRCD            Opcode = 0x80f
	OpAllocTransportDomain   Opcode = 0x816
	OpDeallocTransportDomain Opcode = 0x817
	OpCreateTIR              Opcode = 0x900
	OpDestroyTIR             Opcode = 0x902
	OpCreateSQ               Opcode = 0x904
	OpDestroySQ              Opcode = 0x906
	OpCreateRQ               Opcode = 0x908
	OpDestroyRQ              Opcode = 0x90a
	OpCreateRMP              Opcode = 0x90c
	OpModifyRMP              Opcode = 0x90d
	OpDestroyRMP             Opcode = 0x90e
	OpQueryRMP               Opcode = 0x90f
	OpCreateTIS              Opcode = 0x912
	OpDestroyTIS             Opcode = 0x914
	OpCreateGeneralObject    Opcode = 0xa00
	OpDestroyGeneralObject   Opcode = 0xa03
	OpCreateUCTX             Opcode = 0xa04
	OpDestroyUCTX            Opcode = 0xa06
)

// opcodeNames are the driver's names (mlx5_command_str).
var opcodeNames = map[Opcode]string{
	OpQueryHCACap:            "QUERY_HCA_CAP",
	OpQueryAdapter:           "QUERY_ADAPTER",
	OpInitHCA:                "INIT_HCA",
	OpTeardownHCA:            "TEARDOWN_HCA",
	OpEnableHCA:              "ENABLE_HCA",
	OpDisableHCA:             "DISABLE_HCA",
	OpQueryPages:             "QUERY_PAGES",
	OpManagePages:            "MANAGE_PAGES",
	OpSetHCACap:              "SET_HCA_CAP",
	OpQueryISSI:              "QUERY_ISSI",
	OpSetISSI:                "SET_ISSI",
	OpSetDriverVersion:       "SET_DRIVER_VERSION",
	OpCreateMkey:             "CREATE_MKEY",
	OpQueryMkey:              "QUERY_MKEY",
	OpDestroyMkey:            "DESTROY_MKEY",
	OpQuerySpecialContexts:   "QUERY_SPECIAL_CONTEXTS",
	OpPageFaultResume:        "PAGE_FAULT_RESUME",
	OpCreateEQ:               "CREATE_EQ",
	OpDestroyEQ:              "DESTROY_EQ",
	OpQueryEQ:                "QUERY_EQ",
	OpGenEQE:                 "GEN_EQE",
	OpCreateCQ:               "CREATE_CQ",
	OpDestroyCQ:              "DESTROY_CQ",
	OpQueryCQ:                "QUERY_CQ",
	OpModifyCQ:               "MODIFY_CQ",
	OpCreateQP:               "CREATE_QP",
	OpDestroyQP:              "DESTROY_QP",
	OpRst2InitQP:             "RST2INIT_QP",
	OpInit2RTRQP:             "INIT2RTR_QP",
	OpRTR2RTSQP:              "RTR2RTS_QP",
	OpRTS2RTSQP:              "RTS2RTS_QP",
	OpSQErr2RTSQP:            "SQERR2RTS_QP",
	Op2ErrQP:                 "2ERR_QP",
	Op2RstQP:                 "2RST_QP",
	OpQueryQP:                "QUERY_QP",
	OpSQDRTSQP:               "SQD_RTS_QP",
	OpMADIfc:                 "MAD_IFC",
	OpInit2InitQP:            "INIT2INIT_QP",
	OpCreatePSV:              "CREATE_PSV",
	OpDestroyPSV:             "DESTROY_PSV",
	OpCreateSRQ:              "CREATE_SRQ",
	OpDestroySRQ:             "DESTROY_SRQ",
	OpQuerySRQ:               "QUERY_SRQ",
	OpArmRQ:                  "ARM_RQ",
	OpCreateXRCSRQ:           "CREATE_XRC_SRQ",
	OpDestroyXRCSRQ:          "DESTROY_XRC_SRQ",
	OpQueryXRCSRQ:            "QUERY_XRC_SRQ",
	OpArmXRCSRQ:              "ARM_XRC_SRQ",
	OpCreateDCT:              "CREATE_DCT",
	OpDestroyDCT:             "DESTROY_DCT",
	OpDrainDCT:               "DRAIN_DCT",
	OpQueryDCT:               "QUERY_DCT",
	OpArmDCTForKeyViolation:  "ARM_DCT_FOR_KEY_VIOLATION",
	OpQueryVportState:        "QUERY_VPORT_STATE",
	OpModifyVportState:       "MODIFY_VPORT_STATE",
	OpQueryESWVportContext:   "QUERY_ESW_VPORT_CONTEXT",
	OpModifyESWVportContext:  "MODIFY_ESW_VPORT_CONTEXT",
	OpQueryNICVportContext:   "QUERY_NIC_VPORT_CONTEXT",
	OpModifyNICVportContext:  "MODIFY_NIC_VPORT_CONTEXT",
	OpQueryRoCEAddress:       "QUERY_ROCE_ADDRESS",
	OpSetRoCEAddress:         "SET_ROCE_ADDRESS",
	OpQueryHCAVportContext:   "QUERY_HCA_VPORT_CONTEXT",
	OpModifyHCAVportContext:  "MODIFY_HCA_VPORT_CONTEXT",
	OpQueryHCAVportGID:       "QUERY_HCA_VPORT_GID",
	OpQueryHCAVportPKey:      "QUERY_HCA_VPORT_PKEY",
	OpQueryVportCounter:      "QUERY_VPORT_COUNTER",
	OpAllocQCounter:          "ALLOC_Q_COUNTER",
	OpDeallocQCounter:        "DEALLOC_Q_COUNTER",
	OpQueryQCounter:          "QUERY_Q_COUNTER",
	OpAllocPD:                "ALLOC_PD",
	OpDeallocPD:              "DEALLOC_PD",
	OpAllocUAR:               "ALLOC_UAR",
	OpDeallocUAR:             "DEALLOC_UAR",
	OpConfigIntModeration:    "CONFIG_INT_MODERATION",
	OpAccessReg:              "ACCESS_REG",
	OpAttachToMCG:            "ATTACH_TO_MCG",
	OpDetachFromMCG:          "DETACH_FROM_MCG",
	OpGetDroppedPacketLog:    "GET_DROPPED_PACKET_LOG",
	OpQueryMADDemux:          "QUERY_MAD_DEMUX",
	OpSetMADDemux:            "SET_MAD_DEMUX",
	OpNop:                    "NOP",
	OpAllocXRCD:              "ALLOC_XRCD",
	OpDeallocXRCD:            "DEALLOC_XRCD",
	OpAllocTransportDomain:   "ALLOC_TRANSPORT_DOMAIN",
	OpDeallocTransportDomain: "DEALLOC_TRANSPORT_DOMAIN",
	OpCreateTIR:              "CREATE_TIR",
	OpDestroyTIR:             "DESTROY_TIR",
	OpCreateSQ:               "CREATE_SQ",
	OpDestroySQ:              "DESTROY_SQ",
	OpCreateRQ:               "CREATE_RQ",
	OpDestroyRQ:              "DESTROY_RQ",
	OpCreateRMP:              "CREATE_RMP",
	OpModifyRMP:              "MODIFY_RMP",
	OpDestroyRMP:             "DESTROY_RMP",
	OpQueryRMP:               "QUERY_RMP",
	OpCreateTIS:              "CREATE_TIS",
	OpDestroyTIS:             "DESTROY_TIS",
	OpCreateGeneralObject:    "CREATE_GENERAL_OBJECT",
	OpDestroyGeneralObject:   "DESTROY_GENERAL_OBJECT",
	OpCreateUCTX:             "CREATE_UCTX",
	OpDestroyUCTX:            "DESTROY_UCTX",
}

// String is the driver's name for the opcode, as it logs it.
func (op Opcode) String() string { return named(opcodeNames, op, "unknown command opcode") }

// Known reports whether op is one of the opcodes named here.
func (op Opcode) Known() bool {
	_, ok := opcodeNames[op]
	return ok
}

// Opcodes are the opcodes named here, in increasing order.
func Opcodes() []Opcode {
	ops := make([]Opcode, 0, len(opcodeNames))
	for op := range opcodeNames {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}
