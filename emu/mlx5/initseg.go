package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// initSeg is the register file of the initialization segment (BAR0 offset
// 0, spec §1.3) apart from the command queue's registers (cmdq).
type initSeg struct {
	// initializing counts the reads of the initializing register that
	// still see firmware initializing.
	initializing int
	// healthCounter advances on every read of health_counter: the driver
	// samples it every 2–3 s and reports the device after three equal
	// samples (core/health.c: poll_health, MAX_MISSES), so a counter that
	// moves on reads never misses, needs no goroutine and makes a test's
	// reads deterministic. It survives resets, as firmware's does.
	healthCounter uint32
	// synd is the health buffer's syndrome: 0 while the firmware is well.
	synd uint8
}

func (s *initSeg) powerOn(initializingReads int) {
	s.initializing = initializingReads
	s.synd = 0
}

// reg32 reads the 32-bit register at reg (4-byte aligned, inside the init
// segment). Reads have side effects: initializing counts down, the health
// counter moves.
func (d *Device) reg32(reg uint64) uint32 {
	switch reg {
	case ifc.InitSegFWRev:
		return ifc.FWRev(FWMajor, FWMinor)
	case ifc.InitSegCmdIfRevFWSub:
		return ifc.CmdIfRevFWSub(ifc.CmdIfRev, FWSub)
	case ifc.InitSegCmdqAddrH:
		return d.cmdq.addrH
	case ifc.InitSegCmdqAddrLSz:
		return d.cmdq.addrL&ifc.CmdqAddrLMask | uint32(d.cmdq.nicState)<<ifc.NICIfcShift |
			LogCmdqSize<<ifc.LogCmdqSizeShift | LogCmdqStride<<ifc.LogCmdqStrideShift
	case ifc.InitSegInitializing:
		// The firmware takes a software reset (reset_fw_if_needed reads
		// the bit before it writes SW_RESET to nic_interface).
		if d.seg.initializing > 0 {
			d.seg.initializing--
			return ifc.InitializingBit | ifc.FWResetSupportedBit
		}
		return ifc.FWResetSupportedBit
	case ifc.HealthFWVer:
		// Never all ones: that is "PCI not working" (sensor_pci_not_working).
		return ifc.FWRev(FWMajor, FWMinor)
	case ifc.HealthIriscIndex: // irisc_index, synd, ext_synd
		return uint32(d.seg.synd) << 16
	case ifc.HealthRFRSeverity:
		// A syndrome asks for a reset (rfr, bit 7 of the byte): with
		// both, the driver's health poll enters its internal error
		// state (sensor_fw_synd_rfr).
		if d.seg.synd != 0 {
			return ifc.HealthRFR << 24
		}
		return 0
	case ifc.InitSegHealthCounter:
		d.pollRQsStepped() // receives posted in ERR, in a recording or replay (datapath.go)
		d.seg.healthCounter++
		return d.seg.healthCounter
	case ifc.InitSegInternalTimerH:
		return uint32(d.clock.timerRead() >> 32)
	case ifc.InitSegInternalTimerL:
		return uint32(d.clock.timerRead())
	}
	// Everything else reads 0: cmd_q_init_to 0 (default timeouts, no
	// DTOR), the real-time clock (no real-time caps), rfr_severity,
	// assert fields.
	return 0
}

// readBAR0 fills a read of BAR0 (lock held). The init segment's registers
// are big-endian words (ioread32be): the byte at reg is bits 31:24. A read
// of any width reads each register it covers once. UAR pages read 0.
func (d *Device) readBAR0(off uint64, p []byte) {
	clear(p)
	end, ok := dma.End(off, uint64(len(p)))
	if !ok || off >= ifc.InitSegSize {
		return
	}
	end = min(end, ifc.InitSegSize)
	for reg := off &^ 3; reg < end; reg += 4 {
		v := d.reg32(reg)
		for i := uint64(0); i < 4; i++ {
			if a := reg + i; a >= off && a < end {
				p[a-off] = byte(v >> (24 - 8*i))
			}
		}
	}
}

// writeBAR0 handles a write to BAR0 (lock held): the command queue's
// registers, and the UAR pages' doorbells.
func (d *Device) writeBAR0(off uint64, p []byte) {
	if off >= 3*4096 {
		d.writeUAR(off, p)
		return
	}
	if len(p) != 4 || off&3 != 0 {
		d.log.Debug("init segment write ignored: registers are 32-bit", "off", off, "len", len(p))
		return
	}
	v := binary.BigEndian.Uint32(p)
	switch off {
	case ifc.InitSegCmdqAddrH:
		d.cmdq.addrH = v
	case ifc.InitSegCmdqAddrLSz:
		d.cmdq.setAddrL(v)
		if d.cmdq.nicState == ifc.NICIfcSWReset {
			d.swReset()
		}
	case ifc.InitSegCmdDbell:
		d.doorbell(v)
	default:
		d.log.Debug("write to a read-only or reserved init segment register ignored", "off", off, "value", v)
	}
}

// swReset is the firmware's software reset, which the driver asks for by
// writing SW_RESET to cmdq_addr_l_sz's nic_interface (core/health.c:
// reset_fw_if_needed, when the health buffer's syndrome has the rfr bit):
// the function goes back to its power-on state (every object freed, a
// fault's DEVICE_FATAL cleared; strict mode's latch stays), firmware
// initializes again, and nic_interface reads DISABLED, which the driver
// waits for before its recovery probes the function again
// (mlx5_health_try_recover: wait_vital, then mlx5_load_one).
func (d *Device) swReset() {
	d.log.Warn("firmware software reset (nic_interface SW_RESET): the function is back to power-on")
	d.powerOn()
	d.core.Drop()
	d.cmdq.nicState = ifc.NICIfcDisabled
	d.fn.swReset = true
}
