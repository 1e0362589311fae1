package mlx5test

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// Probed is what mlx5_core's probe learned from the device and set up in
// it (core/main.c: mlx5_function_enable, mlx5_function_open,
// mlx5_init_once, mlx5_load).
type Probed struct {
	ISSI uint16
	// CapsCur/CapsMax and AtomicCur/AtomicMax are the capability blocks
	// (4 KiB each) as the driver last read them (dev->caps.hca[]).
	CapsCur, CapsMax     []byte
	AtomicCur, AtomicMax []byte
	// LogMaxQP is what the driver wrote into CUR (profile 2).
	LogMaxQP uint32
	// BoardID is QUERY_ADAPTER's PSID (dev->board_id).
	BoardID string
	// UAR is the index ALLOC_UAR gave the kernel (dev->priv.uar).
	UAR uint32
	// The async EQs (core/eq.c: create_async_eqs); PagesEQ is nil when
	// page_request_disable skips it.
	CmdEQ, AsyncEQ, PagesEQ *EQ
	// CompEQ is the completion EQ, created on first use (IBProbe).
	CompEQ *EQ
	// Events: commands complete by CMD EQEs (mlx5_cmd_use_events).
	Events bool
}

// The profile the driver loads with (core/main.c: profile[2], MLX5_DEFAULT_PROF).
const (
	profileLogMaxQP = 18
	// DriverVersion is what mlx5_set_driver_version sends on a 6.12 kernel.
	DriverVersion = "Linux,mlx5_core,6.12.117"
)

// EQ sizes (core/eq.c, include/linux/mlx5/eq.h): MLX5_NUM_CMD_EQE,
// MLX5_NUM_ASYNC_EQE, MLX5_NUM_SPARE_EQE, and the async EQ's events
// (MLX5_ASYNC_EVENT_MASK).
const (
	NumCmdEQE       = 32
	NumAsyncEQE     = 0x1000
	NumSpareEQE     = 0x80
	AsyncEventMask  = 1<<0x01 | 1<<0x02 | 1<<0x03 | 1<<0x04 | 1<<0x05 | 1<<0x07 | 1<<0x10 | 1<<0x11 | 1<<0x09 | 1<<0x12 | 1<<0x13 | 1<<0x14
	eqPollingBudget = 128 // MLX5_EQ_POLLING_BUDGET
)

// EQ is an event queue as the driver keeps it (struct mlx5_eq): its
// number, size, the 4 KiB pages of its fragmented buffer, its consumer
// index and the vector it was created on.
type EQ struct {
	EQN     uint8
	LogSize uint8
	Pages   []uint64
	CI      uint32
	Mask    [4]uint64
	Intr    int
}

// Size is the number of EQEs.
func (e *EQ) Size() uint32 { return 1 << e.LogSize }

// EQE is entry i of the ring (get_eqe).
func (d *Driver) EQE(e *EQ, i uint32) []byte { return d.Bytes(d.EQEAddr(e, i), ifc.EQESize) }

// EQEAddr is where entry i of the ring lives in guest memory.
func (d *Driver) EQEAddr(e *EQ, i uint32) uint64 {
	off := uint64(i&(e.Size()-1)) * ifc.EQESize
	return e.Pages[off>>12] + off&0xfff
}

// NextEQE returns the EQE at the consumer index if software owns it, and
// consumes it (next_eqe_sw, ++cons_index); nil when there is none.
func (d *Driver) NextEQE(e *EQ) []byte {
	b := d.EQE(e, e.CI)
	if (b[ifc.EQEOwner]^byte(e.CI>>e.LogSize))&1 != 0 {
		return nil
	}
	e.CI++
	return b
}

// UpdateCI writes the EQ's doorbell in the kernel's UAR (eq_update_ci):
// the consumer index, and arms the EQ if arm.
func (d *Driver) UpdateCI(e *EQ, arm bool) {
	reg := uint64(ifc.UAREQDoorbellNoArm)
	if arm {
		reg = ifc.UAREQDoorbellArm
	}
	d.Write32(uint64(d.UAR)<<12+reg, uint32(e.EQN)<<ifc.EQDoorbellEQNShift|e.CI&ifc.EQDoorbellCIMask)
}

// ErrCmdTimeout is a command whose completion never came.
var ErrCmdTimeout = errors.New("cmd timeout")

// completion checks how the command in slot just handed back completed:
// in event mode by one CMD EQE with its bit on the command EQ (the
// interrupt handler drains the EQ, at most a budget, and re-arms it); in
// polling mode with no EQE at all on a command EQ that still exists.
func (d *Driver) completion(cmdEQ *EQ, slot int) error {
	if cmdEQ == nil {
		return nil
	}
	var vector uint32
	for range eqPollingBudget {
		eqe := d.NextEQE(cmdEQ)
		if eqe == nil {
			break
		}
		if t := eqe[ifc.EQEType]; t != ifc.EventCmd {
			return fmt.Errorf("EQE type %#x on the command EQ", t)
		}
		vector |= be.Uint32(eqe[ifc.EQEData:])
	}
	if !d.Events {
		if vector != 0 {
			return fmt.Errorf("command completion arrived after timeout (vector %#x) while polling", vector)
		}
		return nil
	}
	d.UpdateCI(cmdEQ, true)
	switch {
	case vector&(1<<slot) == 0:
		return fmt.Errorf("%w: no CMD EQE for slot %d (vector %#x)", ErrCmdTimeout, slot, vector)
	case vector != 1<<slot:
		return fmt.Errorf("CMD EQE for slots not in use: vector %#x", vector)
	}
	return nil
}

// cmdIn is a command input of n bytes (at least the header) with its
// opcode and op_mod set.
func cmdIn(op ifc.Opcode, opMod uint16, n int) []byte {
	in := make([]byte, max(n, ifc.MboxInSize))
	ifc.MboxInOpcode.Set(in, uint32(op))
	ifc.MboxInOpMod.Set(in, uint32(opMod))
	return in
}

// Probe runs mlx5_core's probe up to the end of mlx5_load: function
// enable, function open, init once, load.
func (d *Driver) Probe() error {
	for _, step := range []func() error{d.FunctionEnable, d.FunctionOpen, d.InitOnce, d.Load} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// FunctionEnable is mlx5_function_enable (spec §3.1): the init segment,
// then ENABLE_HCA, the ISSI, and the boot pages.
func (d *Driver) FunctionEnable() error {
	d.Probed = Probed{}
	if err := d.Enable(); err != nil {
		return err
	}
	in := cmdIn(ifc.OpEnableHCA, 0, ifc.EnableHCAInSize)
	if _, err := d.Exec(in, ifc.EnableHCAOutSize); err != nil {
		return fmt.Errorf("enable hca failed: %w", err)
	}
	if err := d.setISSI(); err != nil {
		return err
	}
	return d.satisfyStartupPages(ifc.BootPages)
}

// setISSI is mlx5_core_set_issi: a QUERY_ISSI the device fails with a
// status means ISSI 0; ISSI 1 is set when supported.
func (d *Driver) setISSI() error {
	out, err := d.Exec(cmdIn(ifc.OpQueryISSI, 0, ifc.QueryISSIInSize), ifc.QueryISSIOutSize)
	var ce *CmdError
	switch {
	case errors.As(err, &ce):
		d.ISSI = 0
		return nil
	case err != nil:
		return fmt.Errorf("failed to query ISSI: %w", err)
	}
	sup := ifc.QueryISSIOutSupportedISSIDw0.Get(out)
	switch {
	case sup&(1<<1) != 0:
		in := cmdIn(ifc.OpSetISSI, 0, ifc.SetISSIInSize)
		ifc.SetISSIInCurrentISSI.Set(in, 1)
		if _, err := d.Exec(in, ifc.SetISSIOutSize); err != nil {
			return fmt.Errorf("failed to set ISSI=1: %w", err)
		}
		d.ISSI = 1
	case sup&1 != 0 || sup == 0:
		d.ISSI = 0
	default:
		return fmt.Errorf("ISSI %#x not supported", sup)
	}
	return nil
}

// satisfyStartupPages is mlx5_satisfy_startup_pages: the device must ask
// for no pages (this driver has no MANAGE_PAGES; mlx5_core would give
// them).
func (d *Driver) satisfyStartupPages(opMod uint16) error {
	out, err := d.Exec(cmdIn(ifc.OpQueryPages, opMod, ifc.QueryPagesInSize), ifc.QueryPagesOutSize)
	if err != nil {
		return fmt.Errorf("query pages failed: %w", err)
	}
	if n := int32(ifc.QueryPagesOutNumPages.Get(out)); n != 0 {
		return fmt.Errorf("device asks for %d pages at op_mod %d: MANAGE_PAGES would follow", n, opMod)
	}
	return nil
}

// FunctionOpen is mlx5_function_open (spec §3.2): host endianness, the
// capabilities, init pages, INIT_HCA, the driver version, the caps again.
func (d *Driver) FunctionOpen() error {
	// set_hca_ctrl: HOST_ENDIANNESS, 16 bytes, he = 0 on a little-endian host.
	if _, err := d.AccessReg(ifc.RegHostEndianness, 0, make([]byte, ifc.HostEndiannessRegSize), true); err != nil {
		return fmt.Errorf("set_hca_ctrl failed: %w", err)
	}
	if err := d.handleHCACap(); err != nil {
		return fmt.Errorf("handle_hca_cap failed: %w", err)
	}
	if err := d.handleHCACapAtomic(); err != nil {
		return fmt.Errorf("handle_hca_cap_atomic failed: %w", err)
	}
	if err := d.satisfyStartupPages(ifc.InitPages); err != nil {
		return err
	}
	if _, err := d.Exec(cmdIn(ifc.OpInitHCA, 0, ifc.InitHCAInSize), ifc.InitHCAOutSize); err != nil {
		return fmt.Errorf("init hca failed: %w", err)
	}
	if ifc.CmdHCACapDriverVersion.Get(d.CapsCur) != 0 {
		in := cmdIn(ifc.OpSetDriverVersion, 0, ifc.SetDriverVersionInSize)
		copy(ifc.SetDriverVersionInDriverVersion.Bytes(in), DriverVersion)
		_, _ = d.Exec(in, ifc.SetDriverVersionOutSize) // mlx5_set_driver_version ignores failures
	}
	return d.queryHCACaps()
}

// QueryCaps is mlx5_core_get_caps_mode: one capability block.
func (d *Driver) QueryCaps(typ, mode uint16) ([]byte, error) {
	out, err := d.Exec(cmdIn(ifc.OpQueryHCACap, typ<<1|mode, ifc.QueryHCACapInSize), ifc.QueryHCACapOutSize)
	if err != nil {
		return nil, err
	}
	return ifc.QueryHCACapOutCapability.Bytes(out), nil
}

// getCaps is mlx5_core_get_caps: CUR, then MAX.
func (d *Driver) getCaps(typ uint16) (cur, maxCaps []byte, err error) {
	if cur, err = d.QueryCaps(typ, ifc.CapModeCur); err != nil {
		return nil, nil, err
	}
	if maxCaps, err = d.QueryCaps(typ, ifc.CapModeMax); err != nil {
		return nil, nil, err
	}
	return cur, maxCaps, nil
}

// SetCaps is set_caps: SET_HCA_CAP of one capability block.
func (d *Driver) SetCaps(typ uint16, block []byte) error {
	in := cmdIn(ifc.OpSetHCACap, typ<<1, ifc.SetHCACapInSize)
	copy(ifc.SetHCACapInCapability.Bytes(in), block)
	_, err := d.Exec(in, ifc.SetHCACapOutSize)
	return err
}

// handleHCACap is handle_hca_cap: the general caps, CUR copied and
// changed as the driver changes it, each enable bit only if MAX has it.
// A cap that would make the driver query or set a block this fake does
// not know (and the device keeps off) fails the probe here.
func (d *Driver) handleHCACap() error {
	cur, maxCaps, err := d.getCaps(ifc.CapGeneral)
	if err != nil {
		return err
	}
	d.CapsCur, d.CapsMax = cur, maxCaps
	for _, c := range []struct {
		name string
		f    ifc.Field
	}{{"hca_cap_2", ifc.CmdHCACapHCACap2}, {"roce", ifc.CmdHCACapRoCE}, {"log_max_uctx", ifc.CmdHCACapLogMaxUctx}} {
		if c.f.Get(maxCaps) != 0 {
			return fmt.Errorf("MAX %s=%d: the driver would query more than this fake knows", c.name, c.f.Get(maxCaps))
		}
	}
	set := make([]byte, ifc.HCACapSize)
	copy(set, cur[:ifc.CmdHCACapSize])
	ifc.CmdHCACapPkeyTableSize.Set(set, 0) // to_fw_pkey_sz(128)
	d.LogMaxQP = min(profileLogMaxQP, ifc.CmdHCACapLogMaxQP.Get(maxCaps))
	ifc.CmdHCACapLogMaxQP.Set(set, d.LogMaxQP)
	ifc.CmdHCACapCmdifChecksum.Set(set, 0)
	ifc.CmdHCACapLogUARPageSz.Set(set, 0) // PAGE_SHIFT - 12 on x86
	if ifc.CmdHCACapDCT.Get(maxCaps) != 0 {
		ifc.CmdHCACapDCT.Set(set, 1)
	}
	return d.SetCaps(ifc.CapGeneral, set)
}

// handleHCACapAtomic is handle_hca_cap_atomic: with atomic, the atomic
// caps, and host endianness for 8-byte atomics if the device offers it.
func (d *Driver) handleHCACapAtomic() error {
	if ifc.CmdHCACapAtomic.Get(d.CapsCur) == 0 {
		return nil
	}
	cur, maxCaps, err := d.getCaps(ifc.CapAtomic)
	if err != nil {
		return err
	}
	d.AtomicCur, d.AtomicMax = cur, maxCaps
	if ifc.AtomicCapsSupportedAtomicReq8BEndiannessMode1.Get(cur) != ifc.AtomicReqModeHost {
		return nil
	}
	set := make([]byte, ifc.HCACapSize)
	ifc.AtomicCapsAtomicReq8BEndiannessMode.Set(set, ifc.AtomicReqModeHost)
	return d.SetCaps(ifc.CapAtomic, set)
}

// queryHCACaps is mlx5_query_hca_caps after INIT_HCA: general CUR, then
// each gated block (atomic only, with the caps the device reports). The
// fake checks that CUR now shows what the driver set.
func (d *Driver) queryHCACaps() error {
	cur, err := d.QueryCaps(ifc.CapGeneral, ifc.CapModeCur)
	if err != nil {
		return err
	}
	d.CapsCur = cur
	if got := ifc.CmdHCACapLogMaxQP.Get(cur); got != d.LogMaxQP {
		return fmt.Errorf("CUR log_max_qp=%d after SET_HCA_CAP wrote %d", got, d.LogMaxQP)
	}
	if ifc.CmdHCACapAtomic.Get(cur) != 0 {
		if d.AtomicCur, d.AtomicMax, err = d.getCaps(ifc.CapAtomic); err != nil {
			return err
		}
		if ifc.AtomicCapsSupportedAtomicReq8BEndiannessMode1.Get(d.AtomicMax) != 0 &&
			ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(d.AtomicCur) != ifc.AtomicReqModeHost {
			return fmt.Errorf("CUR atomic_req_8B_endianness_mode=%d after SET_HCA_CAP wrote host (1)", ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(d.AtomicCur))
		}
	}
	return nil
}

// InitOnce is the command of mlx5_init_once with the device's caps:
// QUERY_ADAPTER for the board ID (mlx5_query_board_id, fatal).
func (d *Driver) InitOnce() error {
	out, err := d.Exec(cmdIn(ifc.OpQueryAdapter, 0, ifc.QueryAdapterInSize), ifc.QueryAdapterOutSize)
	if err != nil {
		return fmt.Errorf("query board id failed: %w", err)
	}
	psid := ifc.QueryAdapterOutVSDContdPSID.Bytes(out)
	n := 0
	for n < len(psid) && psid[n] != 0 {
		n++
	}
	d.BoardID = string(psid[:n])
	return nil
}

// maxAsyncEQs is MLX5_MAX_ASYNC_EQS (ODP configured): EQs beyond them are
// completion EQs, and there must be one.
const maxAsyncEQs = 4

// Load is mlx5_load up to the event queues (spec §3.4): the kernel's UAR,
// the command EQ created in polling mode, armed, then event mode, the
// async EQ and, unless page_request_disable, the pages EQ.
func (d *Driver) Load() error {
	maxEQs := ifc.CmdHCACapMaxNumEQs.Get(d.CapsCur)
	if maxEQs == 0 {
		maxEQs = 1 << ifc.CmdHCACapLogMaxEQ.Get(d.CapsCur)
	}
	if maxEQs < maxAsyncEQs+1 {
		return fmt.Errorf("%d EQs: no room for a completion EQ", maxEQs)
	}
	out, err := d.Exec(cmdIn(ifc.OpAllocUAR, 0, ifc.AllocUARInSize), ifc.AllocUAROutSize)
	if err != nil {
		return fmt.Errorf("Failed allocating uar: %w", err)
	}
	d.UAR = ifc.AllocUAROutUAR.Get(out)
	if d.CmdEQ, err = d.CreateEQ(NumCmdEQE, [4]uint64{1 << ifc.EventCmd}, 0); err != nil {
		return fmt.Errorf("failed to create cmd EQ: %w", err)
	}
	d.Events = true // mlx5_cmd_use_events
	if d.AsyncEQ, err = d.CreateEQ(NumAsyncEQE, [4]uint64{AsyncEventMask}, 0); err != nil {
		return fmt.Errorf("failed to create async EQ: %w", err)
	}
	if ifc.CmdHCACapPageRequestDisable.Get(d.CapsCur) != 0 {
		return nil
	}
	if d.PagesEQ, err = d.CreateEQ(1, [4]uint64{1 << ifc.EventPageRequest}, 0); err != nil {
		return fmt.Errorf("failed to create pages EQ: %w", err)
	}
	return nil
}

// CreateEQ is create_map_eq and mlx5_eq_enable: a fragmented buffer of
// 4 KiB pages with every owner bit 1 (init_eq_buf), CREATE_EQ on the
// kernel's UAR, then the arming doorbell.
func (d *Driver) CreateEQ(nent int, mask [4]uint64, intr int) (*EQ, error) {
	logSize := uint8(bits.Len(uint(nent + NumSpareEQE - 1)))
	e := &EQ{LogSize: logSize, Mask: mask, Intr: intr}
	npages := max(1, (ifc.EQESize<<logSize)/4096)
	for range npages {
		e.Pages = append(e.Pages, d.Alloc(4096, 4096))
		d.Alloc(64, 64) // a gap: the pages are not contiguous
	}
	for i := range e.Size() {
		d.EQE(e, i)[ifc.EQEOwner] = 1
	}
	in := make([]byte, ifc.CreateEQInSize+8*npages)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateEQ))
	for i, m := range mask {
		ifc.CreateEQInEventBitmask(i).Set64(in, m)
	}
	eqc := ifc.CreateEQInEQContextEntry.Bytes(in)
	ifc.EQCLogEQSize.Set(eqc, uint32(logSize))
	ifc.EQCUARPage.Set(eqc, d.UAR)
	ifc.EQCIntr.Set(eqc, uint32(intr))
	ifc.EQCLogPageSize.Set(eqc, 0)
	for i, p := range e.Pages {
		be.PutUint64(in[ifc.CreateEQInPAS+8*i:], p)
	}
	out, err := d.Exec(in, ifc.CreateEQOutSize)
	if err != nil {
		return nil, err
	}
	e.EQN = uint8(ifc.CreateEQOutEQNumber.Get(out))
	d.UpdateCI(e, true)
	return e, nil
}

// DestroyEQ is DESTROY_EQ (destroy_unmap_eq).
func (d *Driver) DestroyEQ(e *EQ) error {
	in := cmdIn(ifc.OpDestroyEQ, 0, ifc.DestroyEQInSize)
	ifc.DestroyEQInEQNumber.Set(in, uint32(e.EQN))
	_, err := d.Exec(in, ifc.DestroyEQOutSize)
	return err
}

// AccessReg is mlx5_core_access_reg: a register write (op_mod 0) or read
// (op_mod 1) with data; it returns the register data of the output.
func (d *Driver) AccessReg(id uint16, arg uint32, data []byte, write bool) ([]byte, error) {
	in := make([]byte, ifc.AccessRegisterInSize+len(data))
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpAccessReg))
	if !write {
		ifc.MboxInOpMod.Set(in, ifc.RegRead)
	}
	ifc.AccessRegisterInRegisterID.Set(in, uint32(id))
	ifc.AccessRegisterInArgument.Set(in, arg)
	copy(in[ifc.AccessRegisterData:], data)
	out, err := d.Exec(in, uint32(ifc.AccessRegisterOutSize+len(data)))
	if err != nil {
		return nil, err
	}
	return out[ifc.AccessRegisterData:], nil
}

// Unload is mlx5_unload and mlx5_function_teardown (spec §3.8): the
// pages and async EQs destroyed in event mode, back to polling, the
// command EQ destroyed, the UAR freed, TEARDOWN_HCA and DISABLE_HCA.
func (d *Driver) Unload() error {
	if d.CompEQ != nil {
		if err := d.DestroyEQ(d.CompEQ); err != nil {
			return fmt.Errorf("failed to destroy comp eq: %w", err)
		}
		d.CompEQ = nil
	}
	if d.PagesEQ != nil {
		if err := d.DestroyEQ(d.PagesEQ); err != nil {
			return fmt.Errorf("failed to destroy pages eq: %w", err)
		}
		d.PagesEQ = nil
	}
	if d.AsyncEQ != nil {
		if err := d.DestroyEQ(d.AsyncEQ); err != nil {
			return fmt.Errorf("failed to destroy async eq: %w", err)
		}
		d.AsyncEQ = nil
	}
	d.Events = false // mlx5_cmd_use_polling
	if d.CmdEQ != nil {
		if err := d.DestroyEQ(d.CmdEQ); err != nil {
			return fmt.Errorf("failed to destroy cmd eq: %w", err)
		}
		d.CmdEQ = nil
	}
	in := cmdIn(ifc.OpDeallocUAR, 0, ifc.DeallocUARInSize)
	ifc.DeallocUARInUAR.Set(in, d.UAR)
	if _, err := d.Exec(in, ifc.DeallocUAROutSize); err != nil {
		return fmt.Errorf("dealloc uar failed: %w", err)
	}
	in = cmdIn(ifc.OpTeardownHCA, 0, ifc.TeardownHCAInSize)
	ifc.TeardownHCAInProfile.Set(in, ifc.TeardownGracefulClose)
	if _, err := d.Exec(in, ifc.TeardownHCAOutSize); err != nil {
		return fmt.Errorf("tear_down_hca failed: %w", err)
	}
	if _, err := d.Exec(cmdIn(ifc.OpDisableHCA, 0, ifc.DisableHCAInSize), ifc.DisableHCAOutSize); err != nil {
		return fmt.Errorf("disable hca failed: %w", err)
	}
	return nil
}
