package mlx5

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/mmio"
	"github.com/hcaemu/hcaemu/vfio"
)

const ramBase = 0x100000

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newDevice returns a device on size bytes of guest RAM and its fake
// driver, bus mastering enabled.
func newDevice(t testing.TB, cfg Config, size int) (*Device, *mlx5test.Driver) {
	t.Helper()
	mem := dma.NewFlat(ramBase, size)
	if cfg.Mem == nil {
		cfg.Mem = mem
	}
	if cfg.Log == nil {
		cfg.Log = quiet
	}
	d := New(cfg)
	t.Cleanup(d.Close)
	return d, mlx5test.New(d, mem)
}

// enabled is newDevice with the driver's mlx5_function_enable done.
func enabled(t testing.TB) (*Device, *mlx5test.Driver) {
	t.Helper()
	d, drv := newDevice(t, Config{}, 1<<20)
	if err := drv.Enable(); err != nil {
		t.Fatal(err)
	}
	return d, drv
}

// mboxIn is a command input of n bytes with its header set.
func mboxIn(op ifc.Opcode, opMod uint16, n int) []byte {
	in := make([]byte, max(n, ifc.MboxInSize))
	ifc.MboxInOpcode.Set(in, uint32(op))
	ifc.MboxInOpMod.Set(in, uint32(opMod))
	return in[:n]
}

// TestProbe: mlx5_core's first steps (spec §3.1): the firmware version it
// prints, the command interface revision, initializing clearing, the queue
// address; an unimplemented opcode's BAD_OP as the driver logs it; the
// function state before and after ENABLE_HCA; long inputs and outputs.
func TestProbe(t *testing.T) {
	_, drv := newDevice(t, Config{InitializingReads: 5}, 1<<20)
	if err := drv.Enable(); err != nil {
		t.Fatal(err)
	}
	if maj, min, sub := drv.FWRev&0xffff, drv.FWRev>>16, drv.CmdIfRevFWSub&0xffff; maj != FWMajor || min != FWMinor || sub != FWSub {
		t.Errorf("firmware version %d.%d.%d", maj, min, sub)
	}
	if drv.LogSize != LogCmdqSize || drv.LogStride != LogCmdqStride {
		t.Errorf("queue geometry log_sz %d log_stride %d", drv.LogSize, drv.LogStride)
	}
	if got := drv.Read32(ifc.InitSegCmdqAddrLSz); uint64(got&ifc.CmdqAddrLMask) != drv.Queue&0xffffffff || got&0xff != 0x56 {
		t.Errorf("cmdq_addr_l_sz reads %#x after the queue at %#x", got, drv.Queue)
	}
	// An opcode the device does not implement: BAD_OP with its syndrome,
	// read as the driver reads it.
	out, err := drv.Exec(mboxIn(ifc.OpCreateTIS, 0, 16), 16)
	var ce *mlx5test.CmdError
	if !errors.As(err, &ce) {
		t.Fatalf("CREATE_TIS: %v, want a command error", err)
	}
	if want := "CREATE_TIS(0x912) op_mod(0x0) failed, status bad operation(0x2), syndrome (0x4d580002)"; err.Error() != want {
		t.Errorf("dmesg line %q, want %q", err, want)
	}
	if !bytes.Equal(out[8:], make([]byte, 8)) {
		t.Errorf("output beyond the header not zero: % x", out)
	}
	// Before ENABLE_HCA the function takes nothing else: bad system state.
	out, err = drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), 0x70)
	if !errors.As(err, &ce) || ce.Status != ifc.StatBadSysStateErr || ce.Syndrome != SyndNotEnabled || !bytes.Equal(out[8:], make([]byte, 0x68)) {
		t.Errorf("QUERY_ISSI before ENABLE_HCA: %v", err)
	}
	if _, err := drv.Exec(mboxIn(ifc.OpEnableHCA, 0, 16), 16); err != nil {
		t.Fatalf("ENABLE_HCA: %v", err)
	}
	// QUERY_ISSI's 112-byte output uses one output mailbox.
	out, err = drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), 0x70)
	if err != nil || ifc.QueryISSIOutSupportedISSIDw0.Get(out) != SupportedISSI {
		t.Errorf("QUERY_ISSI: %v, % x", err, out)
	}
	// A long input (SET_HCA_CAP: 16 + 4096 bytes, 8 blocks) and a long
	// output (QUERY_HCA_CAP: 0x1010 bytes).
	if _, err := drv.Exec(mboxIn(ifc.OpSetHCACap, 0, 0x1010), 0x10); err != nil {
		t.Errorf("SET_HCA_CAP: %v", err)
	}
	if out, err := drv.Exec(mboxIn(ifc.OpQueryHCACap, 1, 0x10), 0x1010); err != nil || len(out) != 0x1010 || ifc.CmdHCACapXRC.Get(out[0x10:]) != 1 {
		t.Errorf("QUERY_HCA_CAP: %v", err)
	}
}

// TestConfigSpace: the identity and capabilities of spec §1.1, §1.5.
func TestConfigSpace(t *testing.T) {
	d, _ := newDevice(t, Config{}, 4096)
	var b [mmio.ConfigSize]byte
	d.ReadRegion(mmio.RegionConfig, 0, b[:])
	le := binary.LittleEndian
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"vendor", uint32(le.Uint16(b[0:])), 0x15b3},
		{"device", uint32(le.Uint16(b[2:])), 0x1013},
		{"class", le.Uint32(b[8:]) >> 8, 0x020700},
		{"BAR0 64-bit prefetchable", le.Uint32(b[0x10:]), 0xc},
		{"BAR2 64-bit", le.Uint32(b[0x18:]), 0x4},
		{"MSI-X capability", uint32(b[mmio.MSIXCapOffset]), 0x11},
		{"MSI-X table size", uint32(le.Uint16(b[mmio.MSIXCapOffset+2:])) + 1, DefaultVectors},
		{"MSI-X table in BAR2 at 0", le.Uint32(b[mmio.MSIXCapOffset+4:]), 2},
		{"MSI-X PBA in BAR2", le.Uint32(b[mmio.MSIXCapOffset+8:]), PBAOff | 2},
		{"PCIe capability next", uint32(b[mmio.MSIXCapOffset+1]), mmio.PCIeCapOffset},
		{"PCIe capability", uint32(b[mmio.PCIeCapOffset]), 0x10},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if d.RegionSize(mmio.RegionBAR0) != BAR0Size || d.RegionSize(mmio.RegionBAR1) != 0 || d.RegionSize(mmio.RegionBAR2) != BAR2Size {
		t.Error("region sizes")
	}
	if d.IRQCount(mmio.IRQMSIX) != DefaultVectors || d.IRQCount(0) != 0 {
		t.Error("IRQ counts")
	}
	if err := d.ReadRegion(mmio.RegionBAR1, 0, b[:4]); err == nil {
		t.Error("BAR1 read: no error")
	}
}

// TestInitSegment: the registers the driver reads before and around its
// first command, and the health poll's view (spec §1.3).
func TestInitSegment(t *testing.T) {
	d, drv := newDevice(t, Config{InitializingReads: 2}, 1<<16)
	for i := range 2 {
		if drv.Read32(ifc.InitSegInitializing)&ifc.InitializingBit == 0 {
			t.Errorf("read %d of initializing: clear, want set", i)
		}
	}
	for _, c := range []struct {
		name string
		off  uint64
		want uint32
	}{
		{"initializing: done, a firmware reset offered", ifc.InitSegInitializing, ifc.FWResetSupportedBit},
		{"fw_rev", ifc.InitSegFWRev, 35<<16 | 16},
		{"cmdif_rev_fw_sub", ifc.InitSegCmdIfRevFWSub, 5<<16 | FWSub},
		{"cmdq_addr_l_sz before the driver writes it", ifc.InitSegCmdqAddrLSz, 0x56},
		{"health.fw_ver", ifc.HealthFWVer, 35<<16 | 16},
		{"health.synd", ifc.HealthIriscIndex, 0},
		{"cmd_q_init_to", ifc.InitSegCmdQInitTo, 0},
		{"a UAR page", FirstUAR * 4096, 0},
	} {
		if got := drv.Read32(c.off); got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, got, c.want)
		}
	}
	// The health counter moves between any two reads.
	h := drv.Read32(ifc.InitSegHealthCounter)
	for range 3 {
		if n := drv.Read32(ifc.InitSegHealthCounter); n == h {
			t.Fatalf("health counter stuck at %d", n)
		} else {
			h = n
		}
	}
	// Narrow reads see big-endian bytes: the cmdif revision is the high half.
	var b [2]byte
	d.ReadRegion(mmio.RegionBAR0, ifc.InitSegCmdIfRevFWSub, b[:])
	if binary.BigEndian.Uint16(b[:]) != ifc.CmdIfRev {
		t.Errorf("2-byte read of cmdif_rev_fw_sub: % x", b)
	}
	// The NIC interface state the driver writes reads back; the log sizes
	// stay the device's.
	drv.Write32(ifc.InitSegCmdqAddrH, 0x12)
	drv.Write32(ifc.InitSegCmdqAddrLSz, 0xabcde000|ifc.NICIfcDisabled<<ifc.NICIfcShift|0xff)
	if got := drv.Read32(ifc.InitSegCmdqAddrLSz); got != 0xabcde156 {
		t.Errorf("cmdq_addr_l_sz = %#x, want 0xabcde156", got)
	}
	if got := drv.Read32(ifc.InitSegCmdqAddrH); got != 0x12 {
		t.Errorf("cmdq_addr_h = %#x", got)
	}
	drv.Write32(FirstUAR*4096, 1) // a doorbell on a UAR page: accepted
	d.Reset()
	if got := drv.Read32(ifc.InitSegCmdqAddrLSz); got != 0x56 {
		t.Errorf("cmdq_addr_l_sz after reset = %#x", got)
	}
	if s := d.Stats(); s.UARWrites != 1 {
		t.Errorf("stats %+v", s)
	}
	// Firmware death shows in the health buffer.
	coreModel{d}.DeviceFatal()
	if got := drv.Read32(ifc.HealthIriscIndex) >> 16 & 0xff; got != ifc.HealthSyndFWErr {
		t.Errorf("health.synd after DeviceFatal = %#x", got)
	}
}

// chainCmd is a command with its chains, built as the driver builds it,
// for a test to break before posting.
type chainCmd struct {
	lay                 ifc.CmdLayout
	inBlocks, outBlocks []uint64
}

func newChainCmd(drv *mlx5test.Driver, inLen, outLen uint32) *chainCmd {
	tok := drv.Token()
	c := &chainCmd{}
	var inHead, outHead uint64
	inHead, c.inBlocks = drv.Msg(inLen, tok)
	outHead, c.outBlocks = drv.Msg(outLen, tok)
	c.lay = ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: inLen, InPtr: inHead, OutLen: outLen, OutPtr: outHead, Token: tok}
	drv.Scatter(c.lay.In[:], c.inBlocks, mboxIn(ifc.OpCreateTIS, 0, int(inLen)))
	return c
}

// block returns a block's control fields; put writes them back.
func block(drv *mlx5test.Driver, gpa uint64) ifc.CmdProtBlock {
	p, _ := ifc.DecodeProtBlock(drv.Bytes(gpa, ifc.CmdProtBlockSize))
	return p
}

func put(drv *mlx5test.Driver, gpa uint64, p ifc.CmdProtBlock) {
	p.Encode(drv.Bytes(gpa, ifc.CmdProtBlockSize))
}

// editBlock changes a block's control fields in guest RAM.
func editBlock(drv *mlx5test.Driver, gpa uint64, edit func(*ifc.CmdProtBlock)) {
	p := block(drv, gpa)
	edit(&p)
	put(drv, gpa, p)
}

// TestMalformedCommands: every descriptor or chain the device must refuse
// gets the delivery status the driver reads (status_own >> 1) with the
// ownership bit cleared, and nothing of the output is written; a chain
// longer than its message (the driver's cached messages) is fine.
func TestMalformedCommands(t *testing.T) {
	const outside = 0x7fff_0000_0000 // no RAM there
	for _, c := range []struct {
		name          string
		inLen, outLen uint32
		edit          func(drv *mlx5test.Driver, c *chainCmd)
		want          ifc.DeliveryStatus
	}{
		{"good, inline only", 16, 16, nil, ifc.DeliveryOK},
		{"good, chains both ways", 2000, 1100, nil, ifc.DeliveryOK},
		{"bad descriptor type", 16, 16, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.Type = 6 }, ifc.DeliveryCmdDescrErr},
		{"input shorter than its header", 4, 16, nil, ifc.DeliveryInLengthErr},
		{"input longer than any message", ifc.MaxCmdMsgSize + 1, 16, nil, ifc.DeliveryInLengthErr},
		{"output shorter than status and syndrome", 16, 4, nil, ifc.DeliveryOutLengthErr},
		{"output longer than any message", 16, 16, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.OutLen = 1 << 31 }, ifc.DeliveryOutLengthErr},
		{"input chain missing", 100, 16, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.InPtr = 0 }, ifc.DeliveryInLengthErr},
		{"input chain ends before its length", 1200, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.inBlocks[1], func(p *ifc.CmdProtBlock) { p.Next = 0 })
		}, ifc.DeliveryInLengthErr},
		{"input pointer not 1 KiB aligned", 100, 16, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.InPtr += 0x40 }, ifc.DeliveryInPtrAlignErr},
		{"input mailbox outside guest memory", 100, 16, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.InPtr = outside }, ifc.DeliveryInPtrAlignErr},
		{"input mailbox just past the end of guest memory", 100, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			c.lay.InPtr = drv.Mem.Base + uint64(len(drv.Mem.Mem))
		}, ifc.DeliveryInPtrAlignErr},
		{"next pointer outside guest memory", 1200, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.inBlocks[0], func(p *ifc.CmdProtBlock) { p.Next = outside })
		}, ifc.DeliveryInPtrAlignErr},
		{"input chain loops to its head", 2000, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.inBlocks[1], func(p *ifc.CmdProtBlock) { p.Next = c.inBlocks[0] })
		}, ifc.DeliveryBadBlkNumErr},
		{"input block points at itself, numbered to match", 2000, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.inBlocks[0], func(p *ifc.CmdProtBlock) { p.Next = c.inBlocks[0] })
		}, ifc.DeliveryBadBlkNumErr},
		{"block numbers out of order", 2000, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			p, q := block(drv, c.inBlocks[1]), block(drv, c.inBlocks[2])
			p.BlockNum, q.BlockNum = q.BlockNum, p.BlockNum
			put(drv, c.inBlocks[1], p)
			put(drv, c.inBlocks[2], q)
		}, ifc.DeliveryBadBlkNumErr},
		{"input block with another command's token", 2000, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.inBlocks[2], func(p *ifc.CmdProtBlock) { p.Token++ })
		}, ifc.DeliveryTokErr},
		{"output pointer not aligned", 16, 100, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.OutPtr |= 8 }, ifc.DeliveryOutPtrAlignErr},
		{"output mailbox outside guest memory", 16, 100, func(_ *mlx5test.Driver, c *chainCmd) { c.lay.OutPtr = outside }, ifc.DeliveryOutPtrAlignErr},
		{"output chain ends before its length", 16, 1100, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.outBlocks[0], func(p *ifc.CmdProtBlock) { p.Next = 0 })
		}, ifc.DeliveryOutLengthErr},
		{"output block with a stale token", 16, 1100, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.outBlocks[1], func(p *ifc.CmdProtBlock) { p.Token = 0 })
		}, ifc.DeliveryTokErr},
		{"output block numbered wrong", 16, 1100, func(drv *mlx5test.Driver, c *chainCmd) {
			editBlock(drv, c.outBlocks[1], func(p *ifc.CmdProtBlock) { p.BlockNum = 7 })
		}, ifc.DeliveryBadBlkNumErr},
		{"cached message: more blocks than the length, stale past it", 600, 16, func(drv *mlx5test.Driver, c *chainCmd) {
			// Four blocks allocated, two used; the unused ones carry an old
			// token, an out-of-order number and a pointer nowhere.
			extra, more := drv.Msg(16+4*512, 0x77)
			editBlock(drv, c.inBlocks[1], func(p *ifc.CmdProtBlock) { p.Next = extra })
			editBlock(drv, more[3], func(p *ifc.CmdProtBlock) { p.Next, p.BlockNum = outside+0x13, 99 })
		}, ifc.DeliveryOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, drv := enabled(t)
			cmd := newChainCmd(drv, min(c.inLen, 1<<16), c.outLen)
			cmd.lay.InLen = c.inLen
			if c.edit != nil {
				c.edit(drv, cmd)
			}
			// Poison the output so that a write shows.
			for i := range cmd.lay.Out {
				cmd.lay.Out[i] = 0xee
			}
			for _, gpa := range cmd.outBlocks {
				for i := range ifc.CmdDataBlockSize {
					drv.Bytes(gpa, ifc.CmdDataBlockSize)[i] = 0xee
				}
			}
			got := drv.Post(3, cmd.lay)
			if got.StatusOwn&ifc.CmdOwnerHW != 0 {
				t.Fatal("descriptor still owned by the device")
			}
			if ds := got.DeliveryStatus(); ds != c.want {
				t.Fatalf("delivery status %v (%#x), want %v (%#x)", ds, uint8(ds), c.want, uint8(c.want))
			}
			out := drv.Gather(got.Out[:], cmd.outBlocks, int(min(c.outLen, 1<<16)))
			if c.want != ifc.DeliveryOK {
				if !bytes.Equal(out, bytes.Repeat([]byte{0xee}, len(out))) {
					t.Errorf("refused command wrote output: % x", out[:min(len(out), 32)])
				}
				return
			}
			if ifc.Status(ifc.MboxOutStatus.Get(out)) != ifc.StatBadOpErr || ifc.MboxOutSyndrome.Get(out) != SyndUnsupportedOpcode ||
				!bytes.Equal(out[8:], make([]byte, len(out)-8)) {
				t.Errorf("output % x", out[:min(len(out), 32)])
			}
		})
	}
}

// TestUnanswered: doorbells the device cannot or must not answer leave the
// descriptor alone: no queue address yet, a slot software owns, bus
// mastering off, a queue outside guest memory, bits beyond the queue.
func TestUnanswered(t *testing.T) {
	t.Run("before the queue address", func(t *testing.T) {
		d, drv := newDevice(t, Config{}, 1<<16)
		drv.Write32(ifc.InitSegCmdDbell, 1)
		if s := d.Stats(); s.Unanswered != 1 || s.Commands != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("slot owned by software", func(t *testing.T) {
		_, drv := enabled(t)
		lay := ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: 1, StatusOwn: 0}
		lay.Encode(drv.Bytes(drv.Slot(0), ifc.CmdLayoutSize))
		before := bytes.Clone(drv.Bytes(drv.Slot(0), ifc.CmdLayoutSize))
		drv.Write32(ifc.InitSegCmdDbell, 1)
		if !bytes.Equal(before, drv.Bytes(drv.Slot(0), ifc.CmdLayoutSize)) {
			t.Error("descriptor changed")
		}
	})
	t.Run("bus mastering disabled", func(t *testing.T) {
		d, drv := enabled(t)
		d.WriteRegion(mmio.RegionConfig, mmio.CfgCommand, []byte{mmio.CmdMemory, 0})
		got := drv.Post(0, ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: 1})
		if got.StatusOwn != ifc.CmdOwnerHW {
			t.Errorf("status_own %#x: the device did DMA without bus mastering", got.StatusOwn)
		}
	})
	t.Run("queue outside guest memory", func(t *testing.T) {
		d, drv := enabled(t)
		drv.Write32(ifc.InitSegCmdqAddrH, 0x7fff)
		drv.Write32(ifc.InitSegCmdDbell, 1)
		if s := d.Stats(); s.Unanswered != 1 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("bits beyond the queue", func(t *testing.T) {
		d, drv := enabled(t)
		before := d.Stats()
		drv.Write32(ifc.InitSegCmdDbell, 0) // nothing rung
		if d.Stats() != before {
			t.Error("an empty doorbell did something")
		}
	})
	t.Run("after close", func(t *testing.T) {
		d, drv := enabled(t)
		d.Close()
		got := drv.Post(0, ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: 1})
		if got.StatusOwn != ifc.CmdOwnerHW {
			t.Errorf("status_own %#x: DMA after Close", got.StatusOwn)
		}
		d.Close() // twice: nothing
	})
}

// TestDoorbellManySlots: one doorbell write with several bits starts each
// slot; each gets its own answer.
func TestDoorbellManySlots(t *testing.T) {
	d, drv := enabled(t)
	slots := []int{0, 5, 30}
	var mask uint32
	for i, s := range slots {
		lay := ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: uint8(i + 1), StatusOwn: ifc.CmdOwnerHW}
		if i == 1 {
			lay.Type = 0 // this one is refused, the others go on
		}
		ifc.MboxInOpcode.Set(lay.In[:], uint32(ifc.OpNop))
		lay.Encode(drv.Bytes(drv.Slot(s), ifc.CmdLayoutSize))
		mask |= 1 << s
	}
	drv.Write32(ifc.InitSegCmdDbell, mask)
	for i, s := range slots {
		got, _ := ifc.DecodeCmdLayout(drv.Bytes(drv.Slot(s), ifc.CmdLayoutSize))
		want := ifc.DeliveryOK
		if i == 1 {
			want = ifc.DeliveryCmdDescrErr
		}
		if got.StatusOwn&1 != 0 || got.DeliveryStatus() != want {
			t.Errorf("slot %d: status_own %#x", s, got.StatusOwn)
		}
	}
	if s := d.Stats(); s.Commands != 3 || s.Delivered != 2 || s.Refused != 1 {
		t.Errorf("stats %+v", s)
	}
}

// The device is a vfio-user function (cmd/hcaemu serves it next).
var _ vfio.Device = (*Device)(nil)

// TestExecDeliveryError: a refused command fails in the fake driver as in
// mlx5_core, with the errno of its delivery status.
func TestExecDeliveryError(t *testing.T) {
	_, drv := enabled(t)
	_, err := drv.Exec(mboxIn(ifc.OpEnableHCA, 0, 4), 16)
	var de *mlx5test.DeliveryError
	if !errors.As(err, &de) || de.Status != ifc.DeliveryInLengthErr || de.Errno() != syscall.ENOMSG {
		t.Fatalf("4-byte input: %v", err)
	}
}
