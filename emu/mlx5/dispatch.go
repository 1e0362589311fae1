package mlx5

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// A command's answer: its status and syndrome (mbox_out). The zero value
// is OK.
type result struct {
	status ifc.Status
	synd   uint32
}

var ok = result{}

// Syndromes of the device's command failures: stable per cause, so that a
// guest's dmesg line ("... failed, status bad parameter(0x3), syndrome
// (0x...)") names it. "MX" in the high half, the cause in the low.
const (
	syndBase = 0x4d580000
	// SyndUnsupportedOpcode: the opcode is not implemented.
	SyndUnsupportedOpcode = syndBase | 0x0002
	SyndDeviceFatal       = syndBase | 0x0001 // strict mode latched the device
	SyndUID               = syndBase | 0x0010 // uid != 0: no DEVX (log_max_uctx = 0)
	SyndInLen             = syndBase | 0x0011 // input shorter than the command's _in
	SyndOutLen            = syndBase | 0x0012 // output shorter than the command's _out
	SyndNotEnabled        = syndBase | 0x0013 // before ENABLE_HCA
	SyndNotInitialized    = syndBase | 0x0014 // before INIT_HCA (or after TEARDOWN_HCA)
	SyndInitialized       = syndBase | 0x0015 // after INIT_HCA: too late for it
	SyndFunctionID        = syndBase | 0x0020 // another function, or the embedded CPU's
	SyndISSI              = syndBase | 0x0021 // an ISSI the device does not support
	SyndPagesOpMod        = syndBase | 0x0022 // query_pages_in.op_mod not BOOT, INIT or REGULAR
	SyndTeardownProfile   = syndBase | 0x0023 // a teardown profile whose cap is off
	SyndCapType           = syndBase | 0x0030 // a capability type not reported
	SyndCapOpMod          = syndBase | 0x0031 // SET_HCA_CAP with the mode bit set
	SyndCapField          = syndBase | 0x0032 // a written capability beyond MAX
	SyndRegister          = syndBase | 0x0040 // a register the device does not implement
	SyndRegOpMod          = syndBase | 0x0041 // access_register_in.op_mod neither read nor write
	SyndRegLen            = syndBase | 0x0042 // register data shorter than the register
	SyndRegField          = syndBase | 0x0043 // a register field out of range
	SyndRegReadOnly       = syndBase | 0x0044 // a write to a read-only register
	SyndNoUAR             = syndBase | 0x0050 // every UAR index handed out
	SyndUARUnknown        = syndBase | 0x0051 // a UAR index this function does not hold
	SyndUARBusy           = syndBase | 0x0052 // a UAR an EQ still rings through
	SyndEQSize            = syndBase | 0x0060 // log_eq_size beyond log_max_eq_sz
	SyndEQNoEQN           = syndBase | 0x0061 // every EQ number in use
	SyndEQUAR             = syndBase | 0x0062 // eqc.uar_page not an allocated UAR
	SyndEQIntr            = syndBase | 0x0063 // eqc.intr beyond the MSI-X table
	SyndEQPageSize        = syndBase | 0x0064 // eqc.log_page_size or page_offset out of range
	SyndEQPAS             = syndBase | 0x0065 // a PAS entry misaligned or outside guest memory
	SyndEQPASLen          = syndBase | 0x0066 // inlen too short for the PAS the EQ needs
	SyndEQCmd             = syndBase | 0x0067 // a second EQ subscribing to command completions
	SyndEQContext         = syndBase | 0x0068 // eqc fields the device does not implement (ec)
	SyndEQUnknown         = syndBase | 0x0069 // DESTROY_EQ of an EQ that does not exist
)

// The function's life (spec §3): ENABLE_HCA, then INIT_HCA after the
// capabilities are set; TEARDOWN_HCA goes back to enabled, DISABLE_HCA
// forgets everything.
type funcState uint8

const (
	stateDisabled funcState = iota
	stateEnabled
	stateInitialized
)

// cmdSpec is what the dispatcher knows of an implemented command: the
// least input and output (MLX5_ST_SZ_BYTES of its _in and _out), the
// state the function must be in (at least), and the handler, which gets
// the whole input (a copy: guest memory is not read again) and the
// zeroed output.
type cmdSpec struct {
	inLen, outLen uint32
	state         funcState
	run           func(d *Device, in, out []byte) result
}

// commands are the implemented opcodes: Stage 1's but MAD_IFC (BAD_OP
// until the SMA of package emu/ib answers it), and Stage 2's QUERY_QP.
var commands map[ifc.Opcode]cmdSpec

func init() {
	commands = map[ifc.Opcode]cmdSpec{
		ifc.OpEnableHCA:        {ifc.EnableHCAInSize, ifc.EnableHCAOutSize, stateDisabled, (*Device).enableHCA},
		ifc.OpDisableHCA:       {ifc.DisableHCAInSize, ifc.DisableHCAOutSize, stateEnabled, (*Device).disableHCA},
		ifc.OpTeardownHCA:      {ifc.TeardownHCAInSize, ifc.TeardownHCAOutSize, stateInitialized, (*Device).teardownHCA},
		ifc.OpQueryISSI:        {ifc.QueryISSIInSize, ifc.QueryISSIOutSize, stateEnabled, (*Device).queryISSI},
		ifc.OpSetISSI:          {ifc.SetISSIInSize, ifc.SetISSIOutSize, stateEnabled, (*Device).setISSI},
		ifc.OpQueryPages:       {ifc.QueryPagesInSize, ifc.QueryPagesOutSize, stateEnabled, (*Device).queryPages},
		ifc.OpQueryHCACap:      {ifc.QueryHCACapInSize, ifc.QueryHCACapOutSize, stateEnabled, (*Device).queryHCACap},
		ifc.OpSetHCACap:        {ifc.SetHCACapInSize, ifc.SetHCACapOutSize, stateEnabled, (*Device).setHCACap},
		ifc.OpInitHCA:          {ifc.InitHCAInSize, ifc.InitHCAOutSize, stateEnabled, (*Device).initHCA},
		ifc.OpSetDriverVersion: {ifc.SetDriverVersionInSize, ifc.SetDriverVersionOutSize, stateEnabled, (*Device).setDriverVersion},
		ifc.OpQueryAdapter:     {ifc.QueryAdapterInSize, ifc.QueryAdapterOutSize, stateEnabled, (*Device).queryAdapter},
		ifc.OpAccessReg:        {ifc.AccessRegisterInSize, ifc.AccessRegisterOutSize, stateEnabled, (*Device).accessReg},
		ifc.OpAllocUAR:         {ifc.AllocUARInSize, ifc.AllocUAROutSize, stateInitialized, (*Device).allocUAR},
		ifc.OpDeallocUAR:       {ifc.DeallocUARInSize, ifc.DeallocUAROutSize, stateInitialized, (*Device).deallocUAR},
		ifc.OpCreateEQ:         {ifc.CreateEQInSize, ifc.CreateEQOutSize, stateInitialized, (*Device).createEQ},
		ifc.OpDestroyEQ:        {ifc.DestroyEQInSize, ifc.DestroyEQOutSize, stateInitialized, (*Device).destroyEQ},
		// The verbs half (verbs.go, cq.go, qp.go, srq.go).
		ifc.OpAllocPD:              {ifc.AllocPDInSize, ifc.AllocPDOutSize, stateInitialized, (*Device).allocPD},
		ifc.OpDeallocPD:            {ifc.DeallocPDInSize, ifc.DeallocPDOutSize, stateInitialized, (*Device).deallocPD},
		ifc.OpAllocXRCD:            {ifc.AllocXRCDInSize, ifc.AllocXRCDOutSize, stateInitialized, (*Device).allocXRCD},
		ifc.OpDeallocXRCD:          {ifc.DeallocXRCDInSize, ifc.DeallocXRCDOutSize, stateInitialized, (*Device).deallocXRCD},
		ifc.OpCreateMkey:           {ifc.CreateMkeyInSize, ifc.CreateMkeyOutSize, stateInitialized, (*Device).createMkey},
		ifc.OpDestroyMkey:          {ifc.DestroyMkeyInSize, ifc.DestroyMkeyOutSize, stateInitialized, (*Device).destroyMkey},
		ifc.OpCreateCQ:             {ifc.CreateCQInSize, ifc.CreateCQOutSize, stateInitialized, (*Device).createCQ},
		ifc.OpDestroyCQ:            {ifc.DestroyCQInSize, ifc.DestroyCQOutSize, stateInitialized, (*Device).destroyCQ},
		ifc.OpModifyCQ:             {ifc.ModifyCQInSize, ifc.ModifyCQOutSize, stateInitialized, (*Device).modifyCQ}, // cqresize.go
		ifc.OpCreateQP:             {ifc.CreateQPInSize, ifc.CreateQPOutSize, stateInitialized, (*Device).createQP},
		ifc.OpDestroyQP:            {ifc.DestroyQPInSize, ifc.DestroyQPOutSize, stateInitialized, (*Device).destroyQP},
		ifc.OpRst2InitQP:           {ifc.ModifyQPInSize, ifc.ModifyQPOutSize, stateInitialized, (*Device).rst2initQP},
		ifc.OpInit2RTRQP:           {ifc.ModifyQPInSize, ifc.ModifyQPOutSize, stateInitialized, (*Device).init2rtrQP},
		ifc.OpRTR2RTSQP:            {ifc.ModifyQPInSize, ifc.ModifyQPOutSize, stateInitialized, (*Device).rtr2rtsQP},
		ifc.Op2RstQP:               {ifc.QP2RstInSize, ifc.QP2RstOutSize, stateInitialized, (*Device).qp2rst},
		ifc.OpInit2InitQP:          {ifc.ModifyQPInSize, ifc.ModifyQPOutSize, stateInitialized, (*Device).init2initQP},
		ifc.OpRTS2RTSQP:            {ifc.ModifyQPInSize, ifc.ModifyQPOutSize, stateInitialized, (*Device).rts2rtsQP},
		ifc.Op2ErrQP:               {ifc.QP2ErrInSize, ifc.QP2ErrOutSize, stateInitialized, (*Device).qp2err},
		ifc.OpAttachToMCG:          {ifc.AttachToMCGInSize, ifc.AttachToMCGOutSize, stateInitialized, (*Device).attachMCG},
		ifc.OpDetachFromMCG:        {ifc.DetachFromMCGInSize, ifc.DetachFromMCGOutSize, stateInitialized, (*Device).detachMCG},
		ifc.OpQueryQP:              {ifc.QueryQPInSize, ifc.QueryQPOutSize, stateInitialized, (*Device).queryQP},
		ifc.OpModifyRMP:            {ifc.ModifyRMPInSize, ifc.ModifyRMPOutSize, stateInitialized, (*Device).modifyRMP}, // srqlimit.go
		ifc.OpQueryRMP:             {ifc.QueryRMPInSize, ifc.QueryRMPOutSize, stateInitialized, (*Device).queryRMP},
		ifc.OpCreateRMP:            {ifc.CreateRMPInSize, ifc.CreateRMPOutSize, stateInitialized, (*Device).createRMP},
		ifc.OpDestroyRMP:           {ifc.DestroyRMPInSize, ifc.DestroyRMPOutSize, stateInitialized, (*Device).destroyRMP},
		ifc.OpCreateXRCSRQ:         {ifc.CreateXRCSRQInSize, ifc.CreateXRCSRQOutSize, stateInitialized, (*Device).createXRCSRQ},
		ifc.OpDestroyXRCSRQ:        {ifc.DestroyXRCSRQInSize, ifc.DestroyXRCSRQOutSize, stateInitialized, (*Device).destroyXRCSRQ},
		ifc.OpQueryHCAVportContext: {ifc.QueryHCAVportContextInSize, ifc.QueryHCAVportContextOutSize, stateInitialized, (*Device).queryHCAVportContext},
		ifc.OpMADIfc:               {ifc.MadIfcInSize, ifc.MadIfcOutSize, stateInitialized, (*Device).madIfc},
	}
}

// Implemented reports whether the device implements op (anything else is
// BAD_OP).
func Implemented(op ifc.Opcode) bool {
	_, ok := commands[op]
	return ok
}

// execute runs one command: in is its whole input (at least minInLen
// bytes, copied out of guest memory once), out its whole output (at least
// minOutLen bytes, zeroed), whose status and syndrome it sets. The checks
// every command shares come first, in the order firmware makes them: the
// opcode, the uid, the lengths, the function's state; then the handler
// validates its own fields before it acts.
func (d *Device) execute(in, out []byte) {
	op := ifc.Opcode(ifc.MboxInOpcode.Get(in))
	opMod := ifc.MboxInOpMod.Get(in)
	r := d.dispatch(op, in, out)
	d.commandDone(op, r)
	if r != ok {
		// A failed command's output is its header alone.
		clear(out)
	}
	ifc.MboxOutStatus.Set(out, uint32(r.status))
	ifc.MboxOutSyndrome.Set(out, r.synd)
	d.log.Debug("command", "op", op.String(), "opcode", uint16(op), "op_mod", opMod,
		"status", r.status.String(), "syndrome", r.synd)
}

func (d *Device) dispatch(op ifc.Opcode, in, out []byte) result {
	spec, known := commands[op]
	switch {
	case d.core.Fatal:
		return result{ifc.StatIntErr, SyndDeviceFatal}
	case !known:
		return result{ifc.StatBadOpErr, SyndUnsupportedOpcode}
	}
	if r, failed := d.faultCommand(op); failed {
		return r
	}
	if uid := ifc.MboxInUID.Get(in); uid != 0 {
		return d.refuse(ifc.StatBadParamErr, SyndUID, hca.FindingCommand, op, "mbox_in.uid=%#x: no user contexts (log_max_uctx=0)", uid)
	}
	if uint32(len(in)) < spec.inLen {
		return d.refuse(ifc.StatBadInpLenErr, SyndInLen, hca.FindingCommand, op, "inlen=%d < sizeof %s_in=%d", len(in), cmdStruct(op), spec.inLen)
	}
	if uint32(len(out)) < spec.outLen {
		return d.refuse(ifc.StatBadOutpLenErr, SyndOutLen, hca.FindingCommand, op, "outlen=%d < sizeof %s_out=%d", len(out), cmdStruct(op), spec.outLen)
	}
	switch {
	case d.fn.state < spec.state && d.fn.state == stateDisabled:
		return d.refuse(ifc.StatBadSysStateErr, SyndNotEnabled, hca.FindingCommand, op, "before ENABLE_HCA")
	case d.fn.state < spec.state:
		return d.refuse(ifc.StatBadSysStateErr, SyndNotInitialized, hca.FindingCommand, op, "before INIT_HCA")
	}
	return spec.run(d, in, out)
}

// cmdStruct is the command's name as mlx5_ifc.h spells its structures
// (query_hca_cap for QUERY_HCA_CAP).
func cmdStruct(op ifc.Opcode) string {
	if op == ifc.OpAccessReg {
		return "access_register"
	}
	b := []byte(op.String())
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c == ' ':
			b[i] = '_'
		}
	}
	return string(b)
}

// refuse records a finding for a command the device fails and returns
// its failure: the text names the PRM structure and field, then what the
// driver got.
func (d *Device) refuse(st ifc.Status, synd uint32, kind hca.FindingKind, op ifc.Opcode, format string, args ...any) result {
	d.find(kind, fmt.Sprintf("%s failed: status %s(%#x), syndrome %#x", op, st, uint8(st), synd), format, args...)
	return result{st, synd}
}
