package abi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// pad is n reserved bytes of a C struct (explicit reserved[] members and
// the compiler's alignment padding), zero on the wire.
type pad int

// cLayout lays out C struct members in declaration order, little endian:
// u8, u16, u32, u64 (and Opcode as u32), byte arrays, and pad. It is the
// golden side of the layout tests: the member list is read off the C
// header, independently of the encoders' offsets.
func cLayout(members ...any) []byte {
	var b []byte
	for _, m := range members {
		switch v := m.(type) {
		case uint8:
			b = append(b, v)
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case Opcode:
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		case []byte:
			b = append(b, v...)
		case pad:
			b = append(b, make([]byte, v)...)
		default:
			panic(fmt.Sprintf("cLayout: %T", m))
		}
	}
	return b
}

// Member values: distinct per member, so a member at the wrong offset or of
// the wrong width shows.
var (
	gid   = [16]byte{0xfe, 0x80, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	dmac  = [6]byte{0x00, 0x50, 0x56, 0xa1, 0xa2, 0xa3}
	guid  = [8]byte{0x02, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x03}
	guid2 = [8]byte{0x12, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x04}
)

func cmdHdr(op Opcode) CmdHdr { return CmdHdr{Response: 0x0807060504030201, Cmd: op} }

// struct pvrdma_cmd_hdr { u64 response; u32 cmd; u32 reserved; }
func cmdHdrC(op Opcode) []byte { return cLayout(uint64(0x0807060504030201), op, pad(4)) }

var respHdr = CmdRespHdr{Response: 0x1817161514131211, Ack: 0x80000009, Err: 22}

// struct pvrdma_cmd_resp_hdr { u64 response; u32 ack; u8 err; u8 reserved[3]; }
var respHdrC = cLayout(uint64(0x1817161514131211), uint32(0x80000009), uint8(22), pad(3))

var ahAttr = AHAttr{
	GlobalRoute: GlobalRoute{DGID: gid, FlowLabel: 0x000abcde, SGIDIndex: 1, HopLimit: 64, TrafficClass: 0x88},
	DLID:        0x1234, VLANID: 0x0567, SL: 3, SrcPathBits: 4, StaticRate: 5, AHFlags: AHFlagGRH, PortNum: 1, DMAC: dmac,
}

// struct pvrdma_ah_attr { struct pvrdma_global_route grh { union pvrdma_gid dgid;
// u32 flow_label; u8 sgid_index; u8 hop_limit; u8 traffic_class; u8 reserved; };
// u16 dlid; u16 vlan_id; u8 sl; u8 src_path_bits; u8 static_rate; u8 ah_flags;
// u8 port_num; u8 dmac[6]; u8 reserved; }
var ahAttrC = cLayout(gid[:], uint32(0x000abcde), uint8(1), uint8(64), uint8(0x88), pad(1),
	uint16(0x1234), uint16(0x0567), uint8(3), uint8(4), uint8(5), uint8(AHFlagGRH), uint8(1), dmac[:], pad(1))

var qpAttr = QPAttr{
	State: QPStateRTR, CurState: QPStateInit, PathMTU: MTU1024, PathMigState: MigArmed,
	QKey: 0x80010000, RQPSN: 0x123456, SQPSN: 0x654321, DestQPN: 0x99,
	AccessFlags: AccessLocalWrite | AccessRemoteRead, PKeyIndex: 0x0102, AltPKeyIndex: 0x0304,
	EnSQDAsyncNotify: 1, SQDraining: 2, MaxRdAtomic: 3, MaxDestRdAtomic: 4, MinRNRTimer: 5, PortNum: 6,
	Timeout: 7, RetryCnt: 8, RNRRetry: 9, AltPortNum: 10, AltTimeout: 11,
	Cap: QPCap{MaxSendWR: 128, MaxRecvWR: 512, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 0x40},
	AH:  ahAttr,
	AltAH: AHAttr{GlobalRoute: GlobalRoute{FlowLabel: 0x77, SGIDIndex: 2},
		DLID: 0x4321, PortNum: 2, DMAC: [6]byte{1, 2, 3, 4, 5, 6}},
}

// struct pvrdma_qp_attr { enum qp_state, cur_qp_state, path_mtu, path_mig_state;
// u32 qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags; u16 pkey_index,
// alt_pkey_index; u8 en_sqd_async_notify, sq_draining, max_rd_atomic,
// max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
// alt_port_num, alt_timeout; u8 reserved[5]; struct pvrdma_qp_cap cap {
// u32 max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
// reserved; }; struct pvrdma_ah_attr ah_attr, alt_ah_attr; }
var qpAttrC = cLayout(uint32(2), uint32(1), uint32(3), uint32(2),
	uint32(0x80010000), uint32(0x123456), uint32(0x654321), uint32(0x99), uint32(5),
	uint16(0x0102), uint16(0x0304), uint8(1), uint8(2), uint8(3), uint8(4), uint8(5), uint8(6),
	uint8(7), uint8(8), uint8(9), uint8(10), uint8(11), pad(5),
	uint32(128), uint32(512), uint32(2), uint32(1), uint32(0x40), pad(4),
	ahAttrC,
	make([]byte, 16), uint32(0x77), uint8(2), pad(3), uint16(0x4321), pad(2), pad(4), uint8(2), []byte{1, 2, 3, 4, 5, 6}, pad(1))

var portAttr = PortAttr{State: PortStateActive, MaxMTU: MTU4096, ActiveMTU: MTU1024, GIDTblLen: 16,
	PortCapFlags: 0x04010000, MaxMsgSz: 0x80000000, BadPKeyCntr: 7, QKeyViolCntr: 9, PKeyTblLen: 1,
	LID: 0x0203, SMLID: 0x0405, LMC: 1, MaxVLNum: 2, SMSL: 3, SubnetTimeout: 4, InitTypeReply: 5,
	ActiveWidth: Width1X, ActiveSpeed: SpeedEDR, PhysState: PhysStateLinkUp}

// struct pvrdma_port_attr { enum state, max_mtu, active_mtu; u32 gid_tbl_len,
// port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr; u16 pkey_tbl_len,
// lid, sm_lid; u8 lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply,
// active_width, active_speed, phys_state; u8 reserved[2]; }
var portAttrC = cLayout(uint32(4), uint32(5), uint32(3), uint32(16), uint32(0x04010000), uint32(0x80000000),
	uint32(7), uint32(9), uint16(1), uint16(0x0203), uint16(0x0405),
	uint8(1), uint8(2), uint8(3), uint8(4), uint8(5), uint8(1), uint8(32), uint8(5), pad(2))

var srqAttr = SRQAttr{MaxWR: 0x100, MaxSGE: 4, SRQLimit: 0x10}

// struct pvrdma_srq_attr { u32 max_wr, max_sge, srq_limit, reserved; }
var srqAttrC = cLayout(uint32(0x100), uint32(4), uint32(0x10), pad(4))

var deviceCaps = DeviceCaps{
	FWVer: 1 << 32, NodeGUID: guid, SysImageGUID: guid2, MaxMRSize: 1 << 30, PageSizeCap: 4096,
	VendorID: 0x15AD, VendorPartID: 0x0820, HWVer: 1, MaxQP: 1024, MaxQPWR: 4096, DeviceCapFlags: 0x21,
	MaxSGE: 16, MaxSGERd: 15, MaxCQ: 2048, MaxCQE: 16384, MaxMR: 4096, MaxPD: 1023, MaxQPRdAtom: 16,
	MaxResRdAtom: 16384, MaxQPInitRdAtom: 14, MaxAH: 4095, MaxSRQ: 1022, MaxSRQWR: 4094, MaxSRQSGE: 13,
	MaxUAR: 512, GIDTblLen: 16, MaxPKeys: 1, LocalCAAckDelay: 15, PhysPortCnt: 1, Mode: DeviceModeRoCE,
	AtomicOps: 3, BMMEFlags: 7, GIDTypes: GIDTypeFlagRoCEv2, MaxFastRegPageListLen: 128,
}

// struct pvrdma_device_caps { u64 fw_ver; __be64 node_guid, sys_image_guid;
// u64 max_mr_size, page_size_cap, atomic_arg_sizes; u32 ex_comp_mask,
// device_cap_flags2, max_fa_bit_boundary, log_max_atomic_inline_arg,
// vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
// max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom,
// max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom,
// max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
// max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr,
// max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_uar, gid_tbl_len;
// u16 max_pkeys; u8 local_ca_ack_delay, phys_port_cnt, mode, atomic_ops,
// bmme_flags, gid_types; u32 max_fast_reg_page_list_len; }
var deviceCapsC = cLayout(uint64(1<<32), guid[:], guid2[:], uint64(1<<30), uint64(4096), pad(8),
	pad(16), uint32(0x15AD), uint32(0x0820), uint32(1), uint32(1024), uint32(4096), uint32(0x21),
	uint32(16), uint32(15), uint32(2048), uint32(16384), uint32(4096), uint32(1023), uint32(16),
	pad(4), uint32(16384), uint32(14), pad(4*9), uint32(4095), pad(8),
	uint32(1022), uint32(4094), uint32(13), uint32(512), uint32(16), uint16(1),
	uint8(15), uint8(1), uint8(0), uint8(3), uint8(7), uint8(2), uint32(128))

var dsr = DSR{DriverVersion: VersionQPHandle, GOSInfo: 0x46, CmdSlotDMA: 0x11000, RespSlotDMA: 0x12000,
	AsyncRingPages: RingPageInfo{NumPages: 4, PdirDMA: 0x13000}, CQRingPages: RingPageInfo{NumPages: 5, PdirDMA: 0x14000},
	UARPFN: 0xfe000, Caps: deviceCaps}

// #pragma pack(1) struct pvrdma_device_shared_region { u32 driver_version; u32 pad;
// struct pvrdma_gos_info { u32 bit fields; u32 pad; }; u64 cmd_slot_dma, resp_slot_dma;
// struct pvrdma_ring_page_info { u32 num_pages; u32 reserved; u64 pdir_dma; }
// async_ring_pages, cq_ring_pages; union { u32 uar_pfn; u64 uar_pfn64; };
// struct pvrdma_device_caps caps; }
var dsrC = cLayout(uint32(20), pad(4), uint32(0x46), pad(4), uint64(0x11000), uint64(0x12000),
	uint32(4), pad(4), uint64(0x13000), uint32(5), pad(4), uint64(0x14000), uint64(0xfe000), deviceCapsC)

// message is a structure of the ABI with its C layout.
type message interface {
	Encode([]byte)
	Decode([]byte)
}

var layouts = []struct {
	name   string
	size   int
	msg    message
	golden []byte
}{
	{"pvrdma_cmd_hdr", CmdHdrSize, ptr(cmdHdr(OpCreateQP)), cmdHdrC(OpCreateQP)},
	{"pvrdma_cmd_resp_hdr", CmdRespHdrSize, &respHdr, respHdrC},
	{"pvrdma_global_route", GlobalRouteSize, &ahAttr.GlobalRoute, ahAttrC[:24]},
	{"pvrdma_ah_attr", AHAttrSize, &ahAttr, ahAttrC},
	{"pvrdma_qp_cap", QPCapSize, &qpAttr.Cap, cLayout(uint32(128), uint32(512), uint32(2), uint32(1), uint32(0x40), pad(4))},
	{"pvrdma_qp_attr", QPAttrSize, &qpAttr, qpAttrC},
	{"pvrdma_port_attr", PortAttrSize, &portAttr, portAttrC},
	{"pvrdma_srq_attr", SRQAttrSize, &srqAttr, srqAttrC},
	{"pvrdma_device_caps", DeviceCapsSize, &deviceCaps, deviceCapsC},
	{"pvrdma_device_shared_region", DSRSize, &dsr, dsrC},
	{"pvrdma_eqe", EQESize, &EQE{Type: EventSRQLimitReached, Info: 0x0a0b0c0d}, cLayout(uint32(15), uint32(0x0a0b0c0d))},
	{"pvrdma_cqne", CQNESize, &CQNE{Info: 0x01020304}, cLayout(uint32(0x01020304))},

	// struct pvrdma_cmd_query_port { hdr; u8 port_num; u8 reserved[7]; }
	{"pvrdma_cmd_query_port", CmdQueryPortSize, &CmdQueryPort{Hdr: cmdHdr(OpQueryPort), PortNum: 1},
		cLayout(cmdHdrC(OpQueryPort), uint8(1), pad(7))},
	{"pvrdma_cmd_query_port_resp", CmdQueryPortRespSize, &CmdQueryPortResp{Hdr: respHdr, Attrs: portAttr},
		cLayout(respHdrC, portAttrC)},
	// struct pvrdma_cmd_query_pkey { hdr; u8 port_num; u8 index; u8 reserved[6]; }
	{"pvrdma_cmd_query_pkey", CmdQueryPKeySize, &CmdQueryPKey{Hdr: cmdHdr(OpQueryPKey), PortNum: 1, Index: 2},
		cLayout(cmdHdrC(OpQueryPKey), uint8(1), uint8(2), pad(6))},
	// struct pvrdma_cmd_query_pkey_resp { resp_hdr; u16 pkey; u8 reserved[6]; }
	{"pvrdma_cmd_query_pkey_resp", CmdQueryPKeyRespSize, &CmdQueryPKeyResp{Hdr: respHdr, PKey: 0xFFFF},
		cLayout(respHdrC, uint16(0xFFFF), pad(6))},
	// struct pvrdma_cmd_create_uc { hdr; union { u32 pfn; u64 pfn64; }; }
	{"pvrdma_cmd_create_uc", CmdCreateUCSize, &CmdCreateUC{Hdr: cmdHdr(OpCreateUC), PFN64: 0x1_000fe001},
		cLayout(cmdHdrC(OpCreateUC), uint64(0x1_000fe001))},
	// struct pvrdma_cmd_create_uc_resp { resp_hdr; u32 ctx_handle; u8 reserved[4]; }
	{"pvrdma_cmd_create_uc_resp", CmdCreateUCRespSize, &CmdCreateUCResp{Hdr: respHdr, CtxHandle: 0x31},
		cLayout(respHdrC, uint32(0x31), pad(4))},
	{"pvrdma_cmd_destroy_uc", CmdDestroyUCSize, &CmdDestroyUC{Hdr: cmdHdr(OpDestroyUC), CtxHandle: 0x32},
		cLayout(cmdHdrC(OpDestroyUC), uint32(0x32), pad(4))},
	{"pvrdma_cmd_create_pd", CmdCreatePDSize, &CmdCreatePD{Hdr: cmdHdr(OpCreatePD), CtxHandle: 0x33},
		cLayout(cmdHdrC(OpCreatePD), uint32(0x33), pad(4))},
	{"pvrdma_cmd_create_pd_resp", CmdCreatePDRespSize, &CmdCreatePDResp{Hdr: respHdr, PDHandle: 0x34},
		cLayout(respHdrC, uint32(0x34), pad(4))},
	{"pvrdma_cmd_destroy_pd", CmdDestroyPDSize, &CmdDestroyPD{Hdr: cmdHdr(OpDestroyPD), PDHandle: 0x35},
		cLayout(cmdHdrC(OpDestroyPD), uint32(0x35), pad(4))},
	// struct pvrdma_cmd_create_mr { hdr; u64 start, length, pdir_dma; u32 pd_handle,
	// access_flags, flags, nchunks; }
	{"pvrdma_cmd_create_mr", CmdCreateMRSize, &CmdCreateMR{Hdr: cmdHdr(OpCreateMR), Start: 0x7f0000000800, Length: 0x1000,
		PdirDMA: 0x5000, PDHandle: 3, AccessFlags: 7, Flags: MRFlagFRMR, NChunks: 2},
		cLayout(cmdHdrC(OpCreateMR), uint64(0x7f0000000800), uint64(0x1000), uint64(0x5000), uint32(3), uint32(7), uint32(2), uint32(2))},
	// struct pvrdma_cmd_create_mr_resp { resp_hdr; u32 mr_handle, lkey, rkey; u8 reserved[4]; }
	{"pvrdma_cmd_create_mr_resp", CmdCreateMRRespSize, &CmdCreateMRResp{Hdr: respHdr, MRHandle: 5, LKey: 0x500, RKey: 0x501},
		cLayout(respHdrC, uint32(5), uint32(0x500), uint32(0x501), pad(4))},
	{"pvrdma_cmd_destroy_mr", CmdDestroyMRSize, &CmdDestroyMR{Hdr: cmdHdr(OpDestroyMR), MRHandle: 0x36},
		cLayout(cmdHdrC(OpDestroyMR), uint32(0x36), pad(4))},
	// struct pvrdma_cmd_create_cq { hdr; u64 pdir_dma; u32 ctx_handle, cqe, nchunks; u8 reserved[4]; }
	{"pvrdma_cmd_create_cq", CmdCreateCQSize, &CmdCreateCQ{Hdr: cmdHdr(OpCreateCQ), PdirDMA: 0x6000, CtxHandle: 1, CQE: 1024, NChunks: 17},
		cLayout(cmdHdrC(OpCreateCQ), uint64(0x6000), uint32(1), uint32(1024), uint32(17), pad(4))},
	// struct pvrdma_cmd_create_cq_resp { resp_hdr; u32 cq_handle, cqe; }
	{"pvrdma_cmd_create_cq_resp", CmdCreateCQRespSize, &CmdCreateCQResp{Hdr: respHdr, CQHandle: 7, CQE: 1024},
		cLayout(respHdrC, uint32(7), uint32(1024))},
	// struct pvrdma_cmd_resize_cq { hdr; u32 cq_handle, cqe; }
	{"pvrdma_cmd_resize_cq", CmdResizeCQSize, &CmdResizeCQ{Hdr: cmdHdr(OpResizeCQ), CQHandle: 7, CQE: 2048},
		cLayout(cmdHdrC(OpResizeCQ), uint32(7), uint32(2048))},
	// struct pvrdma_cmd_resize_cq_resp { resp_hdr; u32 cqe; u8 reserved[4]; }
	{"pvrdma_cmd_resize_cq_resp", CmdResizeCQRespSize, &CmdResizeCQResp{Hdr: respHdr, CQE: 2048},
		cLayout(respHdrC, uint32(2048), pad(4))},
	{"pvrdma_cmd_destroy_cq", CmdDestroyCQSize, &CmdDestroyCQ{Hdr: cmdHdr(OpDestroyCQ), CQHandle: 0x37},
		cLayout(cmdHdrC(OpDestroyCQ), uint32(0x37), pad(4))},
	// struct pvrdma_cmd_create_srq { hdr; u64 pdir_dma; u32 pd_handle, nchunks;
	// struct pvrdma_srq_attr attrs; u8 srq_type; u8 reserved[7]; }
	{"pvrdma_cmd_create_srq", CmdCreateSRQSize, &CmdCreateSRQ{Hdr: cmdHdr(OpCreateSRQ), PdirDMA: 0x7000, PDHandle: 2, NChunks: 3, Attrs: srqAttr, SRQType: 1},
		cLayout(cmdHdrC(OpCreateSRQ), uint64(0x7000), uint32(2), uint32(3), srqAttrC, uint8(1), pad(7))},
	// struct pvrdma_cmd_create_srq_resp { resp_hdr; u32 srqn; u8 reserved[4]; }
	{"pvrdma_cmd_create_srq_resp", CmdCreateSRQRespSize, &CmdCreateSRQResp{Hdr: respHdr, SRQN: 9},
		cLayout(respHdrC, uint32(9), pad(4))},
	// struct pvrdma_cmd_modify_srq { hdr; u32 srq_handle, attr_mask; struct pvrdma_srq_attr attrs; }
	{"pvrdma_cmd_modify_srq", CmdModifySRQSize, &CmdModifySRQ{Hdr: cmdHdr(OpModifySRQ), SRQHandle: 9, AttrMask: SRQAttrLimit, Attrs: srqAttr},
		cLayout(cmdHdrC(OpModifySRQ), uint32(9), uint32(2), srqAttrC)},
	// struct pvrdma_cmd_query_srq { hdr; u32 srq_handle; u8 reserved[4]; }
	{"pvrdma_cmd_query_srq", CmdQuerySRQSize, &CmdQuerySRQ{Hdr: cmdHdr(OpQuerySRQ), SRQHandle: 0x38},
		cLayout(cmdHdrC(OpQuerySRQ), uint32(0x38), pad(4))},
	// struct pvrdma_cmd_query_srq_resp { resp_hdr; struct pvrdma_srq_attr attrs; }
	{"pvrdma_cmd_query_srq_resp", CmdQuerySRQRespSize, &CmdQuerySRQResp{Hdr: respHdr, Attrs: srqAttr},
		cLayout(respHdrC, srqAttrC)},
	{"pvrdma_cmd_destroy_srq", CmdDestroySRQSize, &CmdDestroySRQ{Hdr: cmdHdr(OpDestroySRQ), SRQHandle: 0x39},
		cLayout(cmdHdrC(OpDestroySRQ), uint32(0x39), pad(4))},
	// struct pvrdma_cmd_create_qp { hdr; u64 pdir_dma; u32 pd_handle, send_cq_handle,
	// recv_cq_handle, srq_handle, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
	// max_inline_data, lkey, access_flags; u16 total_chunks, send_chunks, max_atomic_arg;
	// u8 sq_sig_all, qp_type, is_srq; u8 reserved[3]; }
	{"pvrdma_cmd_create_qp", CmdCreateQPSize, &CmdCreateQP{Hdr: cmdHdr(OpCreateQP), PdirDMA: 0x8000, PDHandle: 1, SendCQHandle: 2,
		RecvCQHandle: 3, SRQHandle: 4, MaxSendWR: 128, MaxRecvWR: 512, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 5,
		LKey: 0x600, AccessFlags: 1, TotalChunks: 0x0123, SendChunks: 0x0045, MaxAtomicArg: 8, SQSigAll: 1, QPType: QPTypeGSI, IsSRQ: 1},
		cLayout(cmdHdrC(OpCreateQP), uint64(0x8000), uint32(1), uint32(2), uint32(3), uint32(4), uint32(128), uint32(512),
			uint32(2), uint32(1), uint32(5), uint32(0x600), uint32(1), uint16(0x0123), uint16(0x0045), uint16(8),
			uint8(1), uint8(1), uint8(1), pad(3))},
	// struct pvrdma_cmd_create_qp_resp_v2 { resp_hdr; u32 qpn, qp_handle, max_send_wr,
	// max_recv_wr, max_send_sge, max_recv_sge, max_inline_data; } (+4: 8-byte alignment)
	{"pvrdma_cmd_create_qp_resp_v2", CmdCreateQPRespSize, &CmdCreateQPResp{Hdr: respHdr, QPN: 0x101, QPHandle: 0x102,
		MaxSendWR: 128, MaxRecvWR: 512, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 3},
		cLayout(respHdrC, uint32(0x101), uint32(0x102), uint32(128), uint32(512), uint32(2), uint32(1), uint32(3), pad(4))},
	// struct pvrdma_cmd_modify_qp { hdr; u32 qp_handle, attr_mask; struct pvrdma_qp_attr attrs; }
	{"pvrdma_cmd_modify_qp", CmdModifyQPSize, &CmdModifyQP{Hdr: cmdHdr(OpModifyQP), QPHandle: 2, AttrMask: AttrState | AttrAV, Attrs: qpAttr},
		cLayout(cmdHdrC(OpModifyQP), uint32(2), uint32(0x81), qpAttrC)},
	// struct pvrdma_cmd_query_qp { hdr; u32 qp_handle, attr_mask; }
	{"pvrdma_cmd_query_qp", CmdQueryQPSize, &CmdQueryQP{Hdr: cmdHdr(OpQueryQP), QPHandle: 2, AttrMask: 0x1fffff},
		cLayout(cmdHdrC(OpQueryQP), uint32(2), uint32(0x1fffff))},
	// struct pvrdma_cmd_query_qp_resp { resp_hdr; struct pvrdma_qp_attr attrs; }
	{"pvrdma_cmd_query_qp_resp", CmdQueryQPRespSize, &CmdQueryQPResp{Hdr: respHdr, Attrs: qpAttr},
		cLayout(respHdrC, qpAttrC)},
	{"pvrdma_cmd_destroy_qp", CmdDestroyQPSize, &CmdDestroyQP{Hdr: cmdHdr(OpDestroyQP), QPHandle: 0x3a},
		cLayout(cmdHdrC(OpDestroyQP), uint32(0x3a), pad(4))},
	// struct pvrdma_cmd_destroy_qp_resp { resp_hdr; u32 events_reported; u8 reserved[4]; }
	{"pvrdma_cmd_destroy_qp_resp", CmdDestroyQPRespSize, &CmdDestroyQPResp{Hdr: respHdr, EventsReported: 3},
		cLayout(respHdrC, uint32(3), pad(4))},
	// struct pvrdma_cmd_create_bind { hdr; u32 mtu, vlan, index; u8 new_gid[16]; u8 gid_type; u8 reserved[3]; }
	{"pvrdma_cmd_create_bind", CmdCreateBindSize, &CmdCreateBind{Hdr: cmdHdr(OpCreateBind), MTU: 1500, VLAN: 0xfff, Index: 1, NewGID: gid, GIDType: GIDTypeFlagRoCEv2},
		cLayout(cmdHdrC(OpCreateBind), uint32(1500), uint32(0xfff), uint32(1), gid[:], uint8(2), pad(3))},
	// struct pvrdma_cmd_destroy_bind { hdr; u32 index; u8 dest_gid[16]; u8 reserved[4]; }
	{"pvrdma_cmd_destroy_bind", CmdDestroyBindSize, &CmdDestroyBind{Hdr: cmdHdr(OpDestroyBind), Index: 1, DestGID: gid},
		cLayout(cmdHdrC(OpDestroyBind), uint32(1), gid[:], pad(4))},
	{"header-only response", CmdRespHdrOnlySize, &CmdRespHdrOnly{Hdr: respHdr}, respHdrC},
}

func ptr[T any](v T) *T { return &v }

// TestLayouts encodes each structure with distinct member values and
// compares it with the C member list laid out by hand; it checks the size
// (nothing written past it), that every byte of the struct is written
// (reserved bytes are zeroed over garbage), and that decoding the golden
// bytes gives the structure back.
func TestLayouts(t *testing.T) {
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			if len(c.golden) != c.size {
				t.Fatalf("C layout is %d bytes, size constant %d", len(c.golden), c.size)
			}
			buf := bytes.Repeat([]byte{0xEE}, c.size+16)
			c.msg.Encode(buf)
			if !bytes.Equal(buf[:c.size], c.golden) {
				t.Errorf("encoded\n% x\nwant\n% x", buf[:c.size], c.golden)
			}
			if !bytes.Equal(buf[c.size:], bytes.Repeat([]byte{0xEE}, 16)) {
				t.Errorf("wrote past %d bytes: % x", c.size, buf[c.size:])
			}
			got := reflect.New(reflect.TypeOf(c.msg).Elem()).Interface().(message)
			got.Decode(c.golden)
			if !reflect.DeepEqual(got, c.msg) {
				t.Errorf("decoded %+v\nwant %+v", got, c.msg)
			}
		})
	}
}

// TestSlotSizes: the request union is the largest request (MODIFY_QP) and
// the response union the largest response (QUERY_QP).
func TestSlotSizes(t *testing.T) {
	maxReq, maxResp := 0, 0
	for _, c := range layouts {
		if _, ok := c.msg.(Request); ok {
			maxReq = max(maxReq, c.size)
		} else if strings.HasPrefix(c.name, "pvrdma_cmd_") && strings.Contains(c.name, "_resp") {
			maxResp = max(maxResp, c.size)
		}
	}
	if maxReq != CmdReqSize || maxResp != CmdRespSize {
		t.Errorf("largest request %d (CmdReqSize %d), largest response %d (CmdRespSize %d)", maxReq, CmdReqSize, maxResp, CmdRespSize)
	}
	if DSRSize != 280 {
		t.Errorf("DSRSize %d, the driver allocates 280", DSRSize)
	}
}

// TestOpcodes checks the opcode numbering, the acks (PVRDMA_CMD_*_RESP)
// and that NewRequest gives each opcode the request of that opcode.
func TestOpcodes(t *testing.T) {
	cases := []struct {
		op   Opcode
		num  uint32
		ack  uint32
		name string
	}{
		{OpQueryPort, 0, 0x80000000, "QUERY_PORT"},
		{OpCreateQP, 9, 0x80000009, "CREATE_QP"},
		{OpModifyQP, 10, 0x8000000a, "MODIFY_QP"},
		{OpCreateUC, 13, 0x8000000d, "CREATE_UC"},
		{OpCreateBind, 15, 0x8000000f, "CREATE_BIND"},
		{OpCreateSRQ, 17, 0x80000011, "CREATE_SRQ"},
		{OpDestroySRQ, 20, 0x80000014, "DESTROY_SRQ"},
		{NumOpcodes, 21, 0x80000015, "CMD_21"},
	}
	for _, c := range cases {
		if uint32(c.op) != c.num || c.op.Ack() != c.ack || c.op.String() != c.name {
			t.Errorf("%s: %d ack %#x name %q", c.name, uint32(c.op), c.op.Ack(), c.op.String())
		}
	}
	for op := Opcode(0); op < NumOpcodes; op++ {
		req := NewRequest(op)
		if req == nil || req.Opcode() != op {
			t.Errorf("NewRequest(%v) = %T", op, req)
		}
	}
	if NewRequest(NumOpcodes) != nil {
		t.Error("NewRequest of an unknown opcode")
	}
}

// TestRoundTrip decodes random bytes into every structure, encodes it and
// decodes again: the values survive, and the encoding differs from the
// random bytes only in reserved bytes (which encode as zero).
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			typ := reflect.TypeOf(c.msg).Elem()
			// Which bytes are reserved: those the encoding of an all-ones
			// structure leaves zero.
			ones := bytes.Repeat([]byte{0xFF}, c.size)
			full := reflect.New(typ).Interface().(message)
			full.Decode(ones)
			reserved := make([]byte, c.size)
			full.Encode(reserved)
			for i := 0; i < 64; i++ {
				in := make([]byte, c.size)
				for j := range in {
					in[j] = byte(rng.Uint32())
				}
				first := reflect.New(typ).Interface().(message)
				first.Decode(in)
				out := make([]byte, c.size)
				first.Encode(out)
				second := reflect.New(typ).Interface().(message)
				second.Decode(out)
				if !reflect.DeepEqual(first, second) {
					t.Fatalf("round trip changed %+v into %+v", first, second)
				}
				for j := range in {
					if want := in[j] & reserved[j]; out[j] != want {
						t.Fatalf("byte %d: encoded %#x, input %#x (member mask %#x)", j, out[j], in[j], reserved[j])
					}
				}
			}
		})
	}
}

// FuzzDecodeRequest: any slot decodes into the request of its opcode
// without panicking, and re-encodes to the same member values.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(uint8(OpModifyQP), make([]byte, CmdReqSize))
	f.Fuzz(func(t *testing.T, op uint8, in []byte) {
		var slot [CmdReqSize]byte
		copy(slot[:], in)
		req := NewRequest(Opcode(op) % NumOpcodes)
		req.Decode(slot[:])
		var out [CmdReqSize]byte
		req.Encode(out[:])
		again := NewRequest(req.Opcode())
		again.Decode(out[:])
		if !reflect.DeepEqual(req, again) {
			t.Fatalf("%+v != %+v", req, again)
		}
	})
}
