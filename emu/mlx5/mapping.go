package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// command is an mlx5 command as the core names it (MLX5_CMD_OP_CREATE_QP
// is the core's CREATE_QP, as PVRDMA_CMD_CREATE_QP is).
func command(op ifc.Opcode) hca.Command { return hca.Command{Op: uint32(op), Name: op.String()} }

// The mlx5 command names (MLX5_CMD_OP_*), for what checks the names a user
// writes (fault plans).
func init() {
	set := hca.CommandSet{Model: "mlx5", Prefix: "MLX5_CMD_OP_"}
	for _, op := range ifc.Opcodes() {
		set.Names = append(set.Names, command(op).Name)
	}
	hca.RegisterCommands(set)
}
