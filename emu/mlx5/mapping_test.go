package mlx5

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// TestCommandNames: a fault plan names mlx5 commands as the driver does,
// with or without its prefix.
func TestCommandNames(t *testing.T) {
	for _, s := range []string{"MLX5_CMD_OP_ENABLE_HCA", "enable_hca", "2ERR_QP", "MAD_IFC"} {
		if _, ok := hca.CommandName(s); !ok {
			t.Errorf("%q is not a command", s)
		}
	}
	if c := command(ifc.OpQueryHCACap); c.Op != 0x100 || c.Name != "QUERY_HCA_CAP" {
		t.Errorf("command(QUERY_HCA_CAP) = %+v", c)
	}
	ops := ifc.Opcodes()
	if len(ops) < 36 || ops[0] != ifc.OpQueryHCACap {
		t.Errorf("Opcodes: %d, first %v", len(ops), ops[0])
	}
}
