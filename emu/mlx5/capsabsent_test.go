package mlx5

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// TestCapsDeclareAbsent: the capabilities of features the model does not
// carry out read 0 (pyverbs turns the driver's EOPNOTSUPP into a skip;
// a feature offered and failing is an error): DC, ODP, BlueFlame, CQE
// compression; and those it does carry out are offered: memory windows
// (imaicl: mw.go), the HW clock, CQ resize (MODIFY_CQ), XRC, atomics.
func TestCapsDeclareAbsent(t *testing.T) {
	var b [ifc.HCACapSize]byte
	d := &Device{}
	d.capsBlock(b[:], ifc.CapGeneral, ifc.CapModeMax)
	for _, c := range []struct {
		name string
		f    ifc.Field
		want uint32
	}{
		{"imaicl", ifc.CmdHCACapImaicl, 1},                                            // memory windows (mw.go)
		{"device_frequency_khz", ifc.CmdHCACapDeviceFrequencyKHz, DeviceFrequencyKHz}, // a clock (clock.go)
		{"cq_resize", ifc.CmdHCACapCQResize, 1},
		{"xrc", ifc.CmdHCACapXRC, 1},
		{"atomic", ifc.CmdHCACapAtomic, 1},
	} {
		if got := c.f.Get(b[:]); got != c.want {
			t.Errorf("cmd_hca_cap.%s = %d, want %d", c.name, got, c.want)
		}
	}
}
