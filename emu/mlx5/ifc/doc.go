// Package ifc is the interface layout of the emulated ConnectX (mlx5) HCA
// as its driver sees it, named after the driver's own header for it
// (include/linux/mlx5/mlx5_ifc.h, the PRM layouts) and the C structures of
// include/linux/mlx5/device.h: the command queue descriptor
// (mlx5_cmd_layout), the mailbox block (mlx5_cmd_prot_block), the
// initialization segment at BAR0 offset 0 (mlx5_init_seg with its health
// buffer), the command input and output headers (mbox_in, mbox_out), the
// command statuses and delivery statuses, and the command opcodes; and the
// layouts of the commands that bring the function up and down (hca.go):
// their inputs and outputs, the capability blocks (cmd_hca_cap,
// atomic_caps), the registers ACCESS_REG reaches, the EQ context (eqc)
// with its page list, the EQE and the EQ doorbells of a UAR page.
//
// Everything the device and the driver exchange is big-endian. The PRM
// structures of mlx5_ifc.h are declared as bit arrays (u8 name[N] is N
// bits, most significant bit first); a Field names one by bit offset and
// width, and Get/Set read and write it the way MLX5_GET/MLX5_SET do, so a
// context is described by a table of Fields rather than a Go struct.
//
// The package is plain data below the device: standard library only, so
// fuzzers and fake drivers use it without the device.
package ifc
