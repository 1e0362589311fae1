package mlx5

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
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

// TestSyndromes: each transport status maps to the error CQE syndrome
// mlx5dv.h gives it (MLX5_CQE_SYNDROME_*), which the provider turns back
// into the same ibv_wc_status (verbs.h: IBV_WC_LOC_LEN_ERR 1 ...).
func TestSyndromes(t *testing.T) {
	for _, c := range []struct {
		status uint32 // enum ibv_wc_status
		synd   uint8  // MLX5_CQE_SYNDROME_*
	}{
		{1, 0x01}, {2, 0x02}, {4, 0x04}, {5, 0x05}, {7, 0x10},
		{9, 0x12}, {10, 0x13}, {11, 0x14}, {12, 0x15}, {13, 0x16},
	} {
		if got := syndromeOf(transport.Status(c.status)); got != c.synd {
			t.Errorf("status %d: syndrome %#x, want %#x", c.status, got, c.synd)
		}
		if back := uverbs.WCStatus(c.synd); back != c.status {
			t.Errorf("syndrome %#x: the provider reports %d, want %d", c.synd, back, c.status)
		}
	}
}

// TestSendOpcodes: the send WQE opcodes as mlx5dv.h numbers them
// (MLX5_OPCODE_SEND 0x0a ...) map to the transport's; the rest are not
// carried out.
func TestSendOpcodes(t *testing.T) {
	for op, want := range map[uint8]transport.Opcode{
		0x0a: transport.OpSend, 0x0b: transport.OpSendImm, 0x01: transport.OpSendInv,
		0x08: transport.OpWrite, 0x09: transport.OpWriteImm, 0x10: transport.OpRead,
		0x11: transport.OpCompSwap, 0x12: transport.OpFetchAdd,
		0x00: transport.OpNop, 0x14: transport.OpUnsupported, 0x25: transport.OpUnsupported,
	} {
		if got := sendOpcode(op); got != want {
			t.Errorf("opcode %#x: %v, want %v", op, got, want)
		}
	}
}
