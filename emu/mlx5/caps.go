package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// capValue is one capability the device reports: a field of cmd_hca_cap
// or atomic_caps and its value. Every field not listed reads 0.
type capValue struct {
	name string
	f    ifc.Field
	v    uint32
}

// generalCaps are the MAX general capabilities (cmd_hca_cap, spec §4.2)
// of the IB personality. What is not here is 0 on purpose: each 0 skips a
// subsystem the model does not have (no pages EQ beyond what
// page_request_disable skips, no GENERAL_2/ODP/ROCE/ETH/flow-table/QoS/
// DEBUG/DEV_MEM/DEV_EVENT caps queried, no PCAM/MCAM/QCAM registers and so
// no FW tracer, reset or MRTC, no Q counters, no BlueFlame and its
// write-combining test, no DEVX, no fast/force teardown, no
// ib_virt: the port is read through MAD_IFC). The HW clock is there
// (device_frequency_khz, clock.go). imaicl is 1: memory windows of
// types 1 and 2 (mlx5_ib's alloc_mw: a free KLM mkey; the provider's
// bind, unbind and LOCAL_INV UMR WQEs on user QPs; SEND_WITH_INV of a
// type-2 window; remote access through a window: mw.go).
// umr_modify_entity_size_disabled is 0: UMR WQEs load translations
// (umrexec.go), so mlx5_ib keeps its MR cache of free mkeys, registers
// user MRs through the REG_UMR QP and advertises
// IB_DEVICE_MEM_MGT_EXTENSIONS: the kernel's fast registration (frwr.go).
var generalCaps = []capValue{
	{"page_request_disable", ifc.CmdHCACapPageRequestDisable, 1},
	{"log_max_srq_sz", ifc.CmdHCACapLogMaxSRQSz, 15},
	{"log_max_qp_sz", ifc.CmdHCACapLogMaxQPSz, 15},
	{"log_max_qp", ifc.CmdHCACapLogMaxQP, 16},
	{"log_max_srq", ifc.CmdHCACapLogMaxSRQ, 16},
	{"log_max_cq_sz", ifc.CmdHCACapLogMaxCQSz, 22},
	{"log_max_cq", ifc.CmdHCACapLogMaxCQ, 16},
	{"log_max_eq_sz", ifc.CmdHCACapLogMaxEQSz, LogMaxEQSz},
	{"log_max_mkey", ifc.CmdHCACapLogMaxMkey, 20},
	{"log_max_eq", ifc.CmdHCACapLogMaxEQ, LogMaxEQ},
	{"log_max_klm_list_size", ifc.CmdHCACapLogMaxKLMListSize, 16},
	{"log_max_ra_req_qp", ifc.CmdHCACapLogMaxRaReqQP, 4},
	{"log_max_ra_res_qp", ifc.CmdHCACapLogMaxRaResQP, 4},
	{"pkey_table_size", ifc.CmdHCACapPkeyTableSize, 0}, // 128 entries
	{"local_ca_ack_delay", ifc.CmdHCACapLocalCAAckDelay, 16},
	{"port_type", ifc.CmdHCACapPortType, 0}, // InfiniBand
	{"num_ports", ifc.CmdHCACapNumPorts, 1},
	{"log_max_msg", ifc.CmdHCACapLogMaxMsg, 30},
	{"cqe_version", ifc.CmdHCACapCQEVersion, 1},
	{"atomic", ifc.CmdHCACapAtomic, 1},
	{"cq_resize", ifc.CmdHCACapCQResize, 1},
	{"xrc", ifc.CmdHCACapXRC, 1},
	{"ud", ifc.CmdHCACapUD, 1},
	{"uc", ifc.CmdHCACapUC, 1},
	{"rc", ifc.CmdHCACapRC, 1},
	{"log_pg_sz", ifc.CmdHCACapLogPgSz, 12},
	{"driver_version", ifc.CmdHCACapDriverVersion, 1},
	{"log_bf_reg_size", ifc.CmdHCACapLogBFRegSize, 9},
	{"max_wqe_sz_sq", ifc.CmdHCACapMaxWQESzSQ, 1024},
	{"max_wqe_sz_rq", ifc.CmdHCACapMaxWQESzRQ, 512},
	{"max_qp_mcg", ifc.CmdHCACapMaxQPMcg, 0x10000},
	{"log_max_mcg", ifc.CmdHCACapLogMaxMcg, 12},
	{"log_max_pd", ifc.CmdHCACapLogMaxPD, 18},
	{"log_max_xrcd", ifc.CmdHCACapLogMaxXRCD, 16},
	{"log_max_rmp", ifc.CmdHCACapLogMaxRMP, 16},
	{"device_frequency_khz", ifc.CmdHCACapDeviceFrequencyKHz, DeviceFrequencyKHz},
	{"imaicl", ifc.CmdHCACapImaicl, 1}, // memory windows (mw.go)
}

// The EQ limits: 32 EQs (the driver needs at least 5: 4 async ones
// counted and a completion EQ, core/eq.c: get_num_eqs), each up to 2^15
// entries (the async EQ is 2^13).
const (
	LogMaxEQ   = 5
	LogMaxEQSz = 15
)

// atomicCaps are the MAX atomic capabilities (atomic_caps, spec §4.4):
// compare-swap and fetch-add on 8 bytes, host endianness available.
var atomicCaps = []capValue{
	{"supported_atomic_req_8B_endianness_mode_1", ifc.AtomicCapsSupportedAtomicReq8BEndiannessMode1, 1},
	{"atomic_operations", ifc.AtomicCapsAtomicOperations, 0x3},
	{"atomic_size_qp", ifc.AtomicCapsAtomicSizeQP, 0x8},
}

// writableCap is a capability SET_HCA_CAP may change: its CUR value must
// not exceed its MAX (for the enable bits the driver sets only when MAX
// allows: dct, roce, cmdif_checksum, MAX is 0 and so is the only value).
type writableCap struct {
	name string
	f    ifc.Field
	set  func(c *writableCaps, v uint32)
}

var writableGeneral = []writableCap{
	{"log_max_qp", ifc.CmdHCACapLogMaxQP, func(c *writableCaps, v uint32) { c.logMaxQP = v }},
	{"pkey_table_size", ifc.CmdHCACapPkeyTableSize, func(c *writableCaps, v uint32) { c.pkeyTableSize = v }},
	{"log_uar_page_sz", ifc.CmdHCACapLogUARPageSz, func(c *writableCaps, v uint32) { c.logUARPageSz = v }},
	{"cmdif_checksum", ifc.CmdHCACapCmdifChecksum, nil},
	{"dct", ifc.CmdHCACapDCT, nil},
	{"roce", ifc.CmdHCACapRoCE, nil},
}

// writableCaps is what SET_HCA_CAP wrote; CUR reports it over MAX.
type writableCaps struct {
	general                               bool // a general SET_HCA_CAP was taken
	logMaxQP, pkeyTableSize, logUARPageSz uint32
	atomic                                bool // an atomic SET_HCA_CAP was taken
	atomicMode                            uint32
}

// capsBlock fills the capability union b (4 KiB) with capability type typ
// in mode (MAX or CUR); it reports false for a type the device does not
// report.
func (d *Device) capsBlock(b []byte, typ, mode uint32) bool {
	switch typ {
	case ifc.CapGeneral:
		for _, c := range generalCaps {
			c.f.Set(b, c.v)
		}
		if mode == ifc.CapModeCur && d.fn.cur.general {
			ifc.CmdHCACapLogMaxQP.Set(b, d.fn.cur.logMaxQP)
			ifc.CmdHCACapPkeyTableSize.Set(b, d.fn.cur.pkeyTableSize)
			ifc.CmdHCACapLogUARPageSz.Set(b, d.fn.cur.logUARPageSz)
		}
	case ifc.CapAtomic:
		for _, c := range atomicCaps {
			c.f.Set(b, c.v)
		}
		if mode == ifc.CapModeCur {
			ifc.AtomicCapsAtomicReq8BEndiannessMode.Set(b, d.fn.cur.atomicMode)
		}
	default:
		return false
	}
	return true
}

// queryHCACap: QUERY_HCA_CAP (spec §3.2, §4): op_mod = type<<1 | mode.
// The general and atomic types only (atomic = 1); any other type is one
// the device keeps off, and the driver never asks with these caps.
func (d *Device) queryHCACap(in, out []byte) result {
	if r := d.checkFunction(ifc.OpQueryHCACap, "query_hca_cap_in", "other_function", ifc.QueryHCACapInOtherFunction.Get(in), ifc.QueryHCACapInFunctionID.Get(in)); r != ok {
		return r
	}
	opMod := ifc.MboxInOpMod.Get(in)
	if !d.capsBlock(ifc.QueryHCACapOutCapability.Bytes(out), opMod>>1, opMod&1) {
		return d.refuse(ifc.StatBadParamErr, SyndCapType, hca.FindingCommand, ifc.OpQueryHCACap, "query_hca_cap_in.op_mod=%#x: capability type %#x not reported (general 0x0 and atomic 0x3 only)", opMod, opMod>>1)
	}
	return ok
}

// setHCACap: SET_HCA_CAP (spec §3.2 step 2), before INIT_HCA. The general
// block the driver sends is its CUR copy with its changes: the writable
// fields are checked against MAX and kept; the rest is read-only and
// ignored, as firmware does. The atomic block sets the 8-byte atomic
// request endianness, host endianness only if MAX offers it.
func (d *Device) setHCACap(in, _ []byte) result {
	const op = ifc.OpSetHCACap
	if r := d.checkFunction(op, "set_hca_cap_in", "other_function", ifc.SetHCACapInOtherFunction.Get(in), ifc.SetHCACapInFunctionID.Get(in)); r != ok {
		return r
	}
	if d.fn.state != stateEnabled {
		return d.refuse(ifc.StatBadSysStateErr, SyndInitialized, hca.FindingCommand, op, "after INIT_HCA")
	}
	opMod := ifc.MboxInOpMod.Get(in)
	if opMod&1 != 0 {
		return d.refuse(ifc.StatBadParamErr, SyndCapOpMod, hca.FindingCommand, op, "set_hca_cap_in.op_mod=%#x: the mode bit is a query's", opMod)
	}
	set := ifc.SetHCACapInCapability.Bytes(in)
	var maxCaps [ifc.HCACapSize]byte
	switch typ := opMod >> 1; typ {
	case ifc.CapGeneral:
		d.capsBlock(maxCaps[:], typ, ifc.CapModeMax)
		cur := d.fn.cur
		for _, w := range writableGeneral {
			v, limit := w.f.Get(set), w.f.Get(maxCaps[:])
			if v > limit {
				return d.refuse(ifc.StatBadParamErr, SyndCapField, hca.FindingCommand, op, "set_hca_cap_in.capability.cmd_hca_cap.%s=%d > max %d", w.name, v, limit)
			}
			if w.set != nil {
				w.set(&cur, v)
			}
		}
		cur.general = true
		d.fn.cur = cur
	case ifc.CapAtomic:
		d.capsBlock(maxCaps[:], typ, ifc.CapModeMax)
		mode := ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(set)
		if mode != ifc.AtomicReqModeBE && (mode != ifc.AtomicReqModeHost || ifc.AtomicCapsSupportedAtomicReq8BEndiannessMode1.Get(maxCaps[:]) == 0) {
			return d.refuse(ifc.StatBadParamErr, SyndCapField, hca.FindingCommand, op, "set_hca_cap_in.capability.atomic_caps.atomic_req_8B_endianness_mode=%d: BE (0) or host (1) only", mode)
		}
		d.fn.cur.atomic, d.fn.cur.atomicMode = true, mode
	default:
		return d.refuse(ifc.StatBadParamErr, SyndCapType, hca.FindingCommand, op, "set_hca_cap_in.op_mod=%#x: capability type %#x not settable (general 0x0 and atomic 0x3 only)", opMod, typ)
	}
	return ok
}
