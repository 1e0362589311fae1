package tests

import (
	"testing"

	"github.com/hcaemu/hcaemu/mmio"
	"github.com/hcaemu/hcaemu/vfio"
)

// TestRegionIndexes: the device models dispatch on mmio's region and
// interrupt indexes, the vfio-user server numbers them itself (neither
// imports the other); both must be VFIO's numbering.
func TestRegionIndexes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mmio, vfio int
	}{
		{"BAR0", mmio.RegionBAR0, vfio.RegionBAR0},
		{"BAR1", mmio.RegionBAR1, vfio.RegionBAR1},
		{"BAR2", mmio.RegionBAR2, vfio.RegionBAR2},
		{"ROM", mmio.RegionROM, vfio.RegionROM},
		{"config", mmio.RegionConfig, vfio.RegionConfig},
		{"MSI-X", mmio.IRQMSIX, vfio.IRQMSIX},
	} {
		if tc.mmio != tc.vfio {
			t.Errorf("%s: mmio says %d, vfio %d", tc.name, tc.mmio, tc.vfio)
		}
	}
}
