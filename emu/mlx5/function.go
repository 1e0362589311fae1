package mlx5

import (
	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// function is what the driver's commands set up in the function, from
// ENABLE_HCA to DISABLE_HCA (which forgets it all, as does a reset).
type function struct {
	state funcState
	issi  uint16
	// cur is what SET_HCA_CAP wrote of the writable capabilities.
	cur writableCaps
	// driverVersion is SET_DRIVER_VERSION's string.
	driverVersion [64]byte
	// Registers (ACCESS_REG): the port capability mask ib_core sets
	// (PCAP) and the node description (NODE_DESC).
	pcap     uint32
	nodeDesc [ifc.NodeDescRegSize]byte
	// uars are the UAR indexes ALLOC_UAR handed out.
	uars map[uint32]struct{}
	// eqs are the EQs by number; cmdEQ is the one subscribed to command
	// completions (event mode), nil in polling mode.
	eqs   map[uint8]*eq
	cmdEQ *eq
	// obj are the verbs objects (verbs.go); pins counts the page-list
	// entries the function's EQs, CQs, QPs, SRQs and mkeys hold.
	obj  objects
	pins hca.PinBudget
	// latches pair the halves of the 64-bit doorbells of each UAR page.
	latches map[uint32]*doorbell.Latch
	// gsi is the handle of the GSI QP (st QP1) datagrams to QP 1 go to,
	// re-validated on every use; mcgs are the multicast groups by GID,
	// each the QPNs attached (ud.go).
	gsi  uint32
	mcgs map[ib.GID]map[uint32]struct{}
	// swReset: the function is down after the firmware's software reset
	// (swReset), until ENABLE_HCA.
	swReset bool
}

// SupportedISSI is the ISSIs the device supports (bit n: ISSI n): 0 and 1,
// as a ConnectX-4's firmware.
const SupportedISSI = 0x3

// enableHCA: ENABLE_HCA (spec §3.1 step 9). Only this function (0), never
// the embedded CPU's; enabling an enabled function is a no-op.
func (d *Device) enableHCA(in, _ []byte) result {
	if r := d.checkFunction(ifc.OpEnableHCA, "enable_hca_in", "embedded_cpu_function", ifc.EnableHCAInEmbeddedCPUFunction.Get(in), ifc.EnableHCAInFunctionID.Get(in)); r != ok {
		return r
	}
	if d.fn.state == stateDisabled {
		d.fn = function{state: stateEnabled}
	}
	return ok
}

// checkFunction refuses a command for another function than this one:
// st.flag (embedded_cpu_function, other_function) or st.function_id set
// (no VFs, no embedded CPU, no vport_group_manager).
func (d *Device) checkFunction(op ifc.Opcode, st, flag string, set, id uint32) result {
	if set != 0 || id != 0 {
		return d.refuse(ifc.StatBadParamErr, SyndFunctionID, hca.FindingCommand, op, "%s.%s=%d function_id=%d: only function 0", st, flag, set, id)
	}
	return ok
}

// disableHCA: DISABLE_HCA (spec §3.8): the function forgets everything;
// the next probe starts from ENABLE_HCA.
func (d *Device) disableHCA(in, _ []byte) result {
	if r := d.checkFunction(ifc.OpDisableHCA, "disable_hca_in", "embedded_cpu_function", ifc.DisableHCAInEmbeddedCPUFunction.Get(in), ifc.DisableHCAInFunctionID.Get(in)); r != ok {
		return r
	}
	// From the initialized state too: mlx5_function_setup disables the
	// function without a teardown when mlx5_function_open fails after
	// INIT_HCA.
	d.wire.RevokeLoans()
	d.fn = function{}
	return ok
}

// teardownHCA: TEARDOWN_HCA (spec §3.8), the graceful profile only
// (force_teardown and fast_teardown are off). It frees what the driver
// left (a finding: mlx5_unload destroys its EQs and UARs first) and goes
// back to the enabled state, where SET_HCA_CAP and INIT_HCA may come again.
func (d *Device) teardownHCA(in, out []byte) result {
	if p := ifc.TeardownHCAInProfile.Get(in); p != ifc.TeardownGracefulClose {
		return d.refuse(ifc.StatBadParamErr, SyndTeardownProfile, hca.FindingCommand, ifc.OpTeardownHCA, "teardown_hca_in.profile=%d: only GRACEFUL_CLOSE (force_teardown=0, fast_teardown=0)", p)
	}
	if n := d.fn.obj.count(); len(d.fn.eqs) != 0 || len(d.fn.uars) != 0 || n != 0 {
		d.find(hca.FindingHandle, "freed by TEARDOWN_HCA", "TEARDOWN_HCA with %d EQs, %d UARs and %d verbs objects still allocated", len(d.fn.eqs), len(d.fn.uars), n)
	}
	d.fn.eqs, d.fn.cmdEQ, d.fn.uars = nil, nil, nil
	d.wire.RevokeLoans()
	d.fn.obj = objects{}
	d.fn.pins.Reset()
	d.fn.state = stateEnabled
	ifc.TeardownHCAOutState.Set(out, 0) // MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS
	return ok
}

// queryISSI: QUERY_ISSI (spec §3.1 step 10).
func (d *Device) queryISSI(_, out []byte) result {
	ifc.QueryISSIOutCurrentISSI.Set(out, uint32(d.fn.issi))
	ifc.QueryISSIOutSupportedISSIDw0.Set(out, SupportedISSI)
	return ok
}

// setISSI: SET_ISSI, before INIT_HCA, to a supported ISSI.
func (d *Device) setISSI(in, _ []byte) result {
	issi := ifc.SetISSIInCurrentISSI.Get(in)
	switch {
	case d.fn.state != stateEnabled:
		return d.refuse(ifc.StatBadSysStateErr, SyndInitialized, hca.FindingCommand, ifc.OpSetISSI, "after INIT_HCA")
	case issi >= 32 || SupportedISSI&(1<<issi) == 0:
		return d.refuse(ifc.StatBadParamErr, SyndISSI, hca.FindingCommand, ifc.OpSetISSI, "set_issi_in.current_issi=%d: supported_issi_dw0=%#x", issi, SupportedISSI)
	}
	d.fn.issi = uint16(issi)
	return ok
}

// queryPages: QUERY_PAGES (spec §3.1 step 12, §3.2 step 3): the device
// needs no pages of the host at boot, at init, nor ever after
// (page_request_disable = 1: no page request EQEs), so MANAGE_PAGES never
// comes.
func (d *Device) queryPages(in, out []byte) result {
	if r := d.checkFunction(ifc.OpQueryPages, "query_pages_in", "embedded_cpu_function", ifc.QueryPagesInEmbeddedCPUFunction.Get(in), ifc.QueryPagesInFunctionID.Get(in)); r != ok {
		return r
	}
	switch m := ifc.MboxInOpMod.Get(in); m {
	case ifc.BootPages, ifc.InitPages, ifc.PostInitPages:
	default:
		return d.refuse(ifc.StatBadParamErr, SyndPagesOpMod, hca.FindingCommand, ifc.OpQueryPages, "query_pages_in.op_mod=%d: not BOOT(1), INIT(2) or REGULAR(3)", m)
	}
	ifc.QueryPagesOutFunctionID.Set(out, 0)
	ifc.QueryPagesOutNumPages.Set(out, 0)
	return ok
}

// initHCA: INIT_HCA (spec §3.2 step 4), once, after the capabilities are
// set. sw_owner_id and sw_vhca_id are only sent with caps the device
// reports 0 (sw_owner_id, hca_cap_2): firmware without them ignores them.
func (d *Device) initHCA(_, _ []byte) result {
	if d.fn.state != stateEnabled {
		return d.refuse(ifc.StatBadSysStateErr, SyndInitialized, hca.FindingCommand, ifc.OpInitHCA, "INIT_HCA twice (no TEARDOWN_HCA between)")
	}
	d.fn.state = stateInitialized
	d.fn.uars = make(map[uint32]struct{})
	d.fn.eqs = make(map[uint8]*eq)
	d.fn.obj = d.newObjects()
	d.fn.pins.Reset()
	return ok
}

// setDriverVersion: SET_DRIVER_VERSION (spec §3.2 step 5): kept, for
// whoever inspects the device.
func (d *Device) setDriverVersion(in, _ []byte) result {
	copy(d.fn.driverVersion[:], ifc.SetDriverVersionInDriverVersion.Bytes(in))
	return ok
}

// DriverVersion is what the driver last told the device of itself
// (SET_DRIVER_VERSION), up to its first NUL.
func (d *Device) DriverVersion() string {
	d.core.Lock()
	defer d.core.Unlock()
	v := d.fn.driverVersion[:]
	for i, c := range v {
		if c == 0 {
			return string(v[:i])
		}
	}
	return string(v)
}

// The adapter's identity (QUERY_ADAPTER, spec §3.3 step 2): the IEEE
// vendor ID verbs report (Mellanox's OUI) and the PSID ibv_devinfo shows
// as board_id.
const (
	IEEEVendorID = 0x0002c9
	PSID         = "MT_0000000008"
)

// queryAdapter: QUERY_ADAPTER.
func (d *Device) queryAdapter(_, out []byte) result {
	ifc.QueryAdapterOutIEEEVendorID.Set(out, IEEEVendorID)
	ifc.QueryAdapterOutVSDVendorID.Set(out, VendorMellanox)
	copy(ifc.QueryAdapterOutVSDContdPSID.Bytes(out), PSID)
	return ok
}
