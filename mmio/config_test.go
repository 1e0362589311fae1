package mmio

import (
	"encoding/binary"
	"testing"
)

func testConfig() *Config {
	return NewConfig(Identity{Vendor: 0x15AD, Device: 0x0820, Class: 0x028000, Revision: 1},
		[6]BAR{{Size: 0x4000}, {Size: 0x1000}, {Size: 0x200000, Is64: true}},
		&MSIX{Vectors: 3, TableBAR: 0, TableOff: 0, PBABAR: 0, PBAOff: 0x2000})
}

func read32(c *Config, off uint64) uint32 {
	var b [4]byte
	c.Read(off, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func write(c *Config, off uint64, v uint32, n int) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	c.Write(off, b[:n])
}

func TestConfigHeader(t *testing.T) {
	c := testConfig()
	cases := []struct {
		name string
		off  uint64
		want uint32
	}{
		{"IDs", 0x00, 0x082015AD},
		{"status cap list, command 0", 0x04, 0x00100000},
		{"class and revision", 0x08, 0x02800001},
		{"BAR0 32-bit memory", 0x10, 0},
		{"BAR2 64-bit memory", 0x18, 0x4},
		{"capability pointer", 0x34, 0x40},
		{"interrupt pin 0", 0x3C, 0},
		{"MSI-X id, next, 3 vectors", 0x40, 0x00020011},
		{"MSI-X table BIR 0 offset 0", 0x44, 0},
		{"MSI-X PBA BIR 0 offset 0x2000", 0x48, 0x2000},
	}
	for _, tc := range cases {
		if got := read32(c, tc.off); got != tc.want {
			t.Errorf("%s: %#x = %#x, want %#x", tc.name, tc.off, got, tc.want)
		}
	}
}

func TestConfigWrites(t *testing.T) {
	c := testConfig()
	write(c, 0x00, 0xFFFFFFFF, 4) // read-only IDs: accepted, ignored
	if read32(c, 0) != 0x082015AD {
		t.Error("IDs writable")
	}
	write(c, 0x04, 0xFFFF, 2)
	if c.Command() != CmdIO|CmdMemory|CmdBusMaster|CmdSERR|CmdINTxDisable || !c.BusMaster() {
		t.Errorf("command %#x", c.Command())
	}
	write(c, 0x04, CmdMemory, 2)
	if c.BusMaster() {
		t.Error("bus master still on")
	}
	// BAR sizing: all-ones reads back the size mask with the type bits.
	write(c, 0x10, 0xFFFFFFFF, 4)
	if got := read32(c, 0x10); got != 0xFFFFC000 {
		t.Errorf("BAR0 sizing %#x", got)
	}
	write(c, 0x18, 0xFE000000, 4)
	if got := read32(c, 0x18); got != 0xFE000004 {
		t.Errorf("BAR2 %#x", got)
	}
	write(c, 0x42, 0x8000, 2) // MSI-X enable; table size stays
	if !c.MSIXEnabled() || read32(c, 0x40)&0x07FF0000 != 0x00020000 {
		t.Errorf("MSI-X control %#x", read32(c, 0x40))
	}
	write(c, 0xF0, 1, 4)              // reserved: ignored
	c.Write(0xFE, []byte{1, 2, 3, 4}) // runs past the end: no panic
	var b [8]byte
	c.Read(0xFC, b[:])
	c.Reset()
	if c.BusMaster() || c.MSIXEnabled() || read32(c, 0x18) != 0x4 {
		t.Error("reset did not restore power-on contents")
	}
}

func TestReg32(t *testing.T) {
	if reg, v, ok := Reg32(0x14, []byte{1, 0, 0, 0}); !ok || reg != 0x14 || v != 1 {
		t.Errorf("aligned write: %#x %d %v", reg, v, ok)
	}
	for _, c := range []struct {
		off uint64
		n   int
	}{{0x15, 4}, {0x14, 2}, {0x14, 8}, {0x14, 1}} {
		if _, _, ok := Reg32(c.off, make([]byte, c.n)); ok {
			t.Errorf("access of %d at %#x accepted", c.n, c.off)
		}
	}
	p := make([]byte, 2)
	Put32(p, 0x16, 0xAABBCCDD)
	if p[0] != 0xBB || p[1] != 0xAA {
		t.Errorf("upper half read % x", p)
	}
}

// TestExpressConfig: the PCI Express capability follows MSI-X in the list,
// reports its link, and leaves NewConfig's layout alone.
func TestExpressConfig(t *testing.T) {
	c := NewExpressConfig(Identity{Vendor: 0x15B3, Device: 0x1013, Class: 0x020700},
		[6]BAR{{Size: 1 << 26, Is64: true}, {}, {Size: 0x4000, Is64: true}},
		&MSIX{Vectors: 17, TableBAR: 2, PBABAR: 2, PBAOff: 0x2000}, &PCIe{LinkSpeed: 3, LinkWidth: 16})
	for _, tc := range []struct {
		name      string
		off       uint64
		want      uint32
		wantWidth int
	}{
		{"capability pointer", CfgCapPtr, 0x40, 1},
		{"MSI-X next is PCIe", MSIXCapOffset + 1, PCIeCapOffset, 1},
		{"PCIe id, end of list, version 2 endpoint", PCIeCapOffset, 0x00020010, 4},
		{"link capabilities x16 8 GT/s", PCIeCapOffset + PCIeLinkCap, 0x103, 4},
		{"link status", PCIeCapOffset + PCIeLinkSta, 0x103, 2},
		{"supported speeds 2.5, 5, 8", PCIeCapOffset + PCIeLinkCap2, 0xE, 4},
		{"BAR0 64-bit", CfgBAR0, 0x4, 4},
	} {
		got := read32(c, tc.off)
		if tc.wantWidth < 4 {
			got &= 1<<(8*tc.wantWidth) - 1
		}
		if got != tc.want {
			t.Errorf("%s: %#x = %#x, want %#x", tc.name, tc.off, got, tc.want)
		}
	}
	write(c, PCIeCapOffset+PCIeDevCtl, 0xFFFF, 2)
	if got := read32(c, PCIeCapOffset+PCIeDevCtl) & 0xFFFF; got != 0x7FFF {
		t.Errorf("device control after writing 0xffff = %#x: FLR initiate must not stick", got)
	}
	write(c, PCIeCapOffset+PCIeLinkCap, 0, 4)
	c.Reset()
	if got := read32(c, PCIeCapOffset+PCIeDevCtl) & 0xFFFF; got != 0 {
		t.Errorf("device control after reset = %#x", got)
	}
	if got := read32(c, PCIeCapOffset+PCIeLinkCap); got != 0x103 {
		t.Errorf("link capabilities writable: %#x", got)
	}
	if got := read32(testConfig(), PCIeCapOffset); got != 0 {
		t.Errorf("NewConfig has a PCIe capability: %#x", got)
	}
}
