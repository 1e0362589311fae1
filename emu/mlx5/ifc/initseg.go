package ifc

// The initialization segment at BAR0 offset 0 (include/linux/mlx5/device.h:
// struct mlx5_init_seg and struct health_buffer): byte offsets of its
// big-endian 32-bit registers.
const (
	InitSegFWRev          = 0x000 // fw_rev: minor 31:16, major 15:0
	InitSegCmdIfRevFWSub  = 0x004 // cmdif_rev_fw_sub: cmdif rev 31:16, fw sub-minor 15:0
	InitSegCmdqAddrH      = 0x010 // cmdq_addr_h
	InitSegCmdqAddrLSz    = 0x014 // cmdq_addr_l_sz: address 31:12, nic_interface 10:8, log_cmdq_size 7:4, log_cmdq_stride 3:0
	InitSegCmdDbell       = 0x018 // cmd_dbell: bit i starts slot i
	InitSegInitializing   = 0x1fc // initializing: bit 31 while firmware initializes
	InitSegHealth         = 0x200 // struct health_buffer
	InitSegCmdExecTo      = 0xff8 // cmd_exec_to
	InitSegCmdQInitTo     = 0xffc // cmd_q_init_to
	InitSegInternalTimerH = 0x1000
	InitSegInternalTimerL = 0x1004
	InitSegHealthCounter  = 0x1010
	InitSegRealTimeH      = 0x1040
	InitSegRealTimeL      = 0x1044
	InitSegIEEE1588Clk    = 0x2000 // __be64
	InitSegIEEE1588Type   = 0x2008
	InitSegClrIntx        = 0x200c
	// InitSegSize is sizeof(struct mlx5_init_seg).
	InitSegSize = 0x2010
)

// The health buffer (struct health_buffer), offsets from the start of the
// init segment.
const (
	HealthAssertVar     = 0x200 // assert_var[6]
	HealthAssertExitPtr = 0x220
	HealthAssertCallra  = 0x224
	HealthTime          = 0x22c
	HealthFWVer         = 0x230
	HealthHWID          = 0x234
	HealthRFRSeverity   = 0x238 // u8: bit 7 = MLX5_RFR_BIT_OFFSET (FW requests reset)
	HealthRFR           = 0x80  // rfr_severity's rfr bit
	HealthIriscIndex    = 0x23c // u8
	HealthSynd          = 0x23d // u8
	HealthExtSynd       = 0x23e // __be16
	HealthSize          = 0x40
)

// Bits of the init segment's registers.
const (
	// InitializingBit is bit 31 of initializing: firmware still
	// initializing (core/main.c: wait_fw_init).
	InitializingBit = 1 << 31
	// FWResetSupportedBit is MLX5_FW_RESET_SUPPORTED_OFFSET.
	FWResetSupportedBit = 1 << 30
	// EmbeddedCPUBit marks an embedded CPU function (core/ecpf.c).
	EmbeddedCPUBit = 1 << 23

	// CmdqAddrLMask is the address part of cmdq_addr_l_sz: the queue is
	// 4 KiB aligned.
	CmdqAddrLMask = 0xfffff000
	// NICIfcShift is MLX5_NIC_IFC_OFFSET: the NIC interface state, 3 bits.
	NICIfcShift = 8
	NICIfcMask  = 0x7 << NICIfcShift
	// LogCmdqSizeShift and LogCmdqStrideShift place log2 of the number of
	// slots and of a slot's size.
	LogCmdqSizeShift   = 4
	LogCmdqSizeMask    = 0xf << LogCmdqSizeShift
	LogCmdqStrideShift = 0
	LogCmdqStrideMask  = 0xf
	// CmdIfRevShift places the command interface revision in
	// cmdif_rev_fw_sub.
	CmdIfRevShift = 16
)

// NIC interface states in cmdq_addr_l_sz bits 10:8
// (core/health.c: enum MLX5_INITIAL_SEG_NIC_INTERFACE_*).
const (
	NICIfcFullDriver = 0
	NICIfcDisabled   = 1
	NICIfcNoDRAMNIC  = 2
	NICIfcSWReset    = 7
)

// FWRev packs fw_rev from the version major.minor (include/linux/mlx5/driver.h:
// fw_rev_maj is bits 15:0, fw_rev_min bits 31:16).
func FWRev(major, minor uint16) uint32 { return uint32(minor)<<16 | uint32(major) }

// CmdIfRevFWSub packs cmdif_rev_fw_sub (fw_rev_sub is bits 15:0).
func CmdIfRevFWSub(cmdifRev, sub uint16) uint32 {
	return uint32(cmdifRev)<<CmdIfRevShift | uint32(sub)
}

// HealthSyndFWErr is the health buffer syndrome of a firmware internal
// error (core/health.c: MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR):
// any non-zero synd makes the driver's health poll report the device.
const HealthSyndFWErr = 0x1
