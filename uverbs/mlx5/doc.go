// Package mlx5 holds the ConnectX (mlx5) data-path formats that the
// unprivileged guest (rdma-core's mlx5 provider) and the kernel driver
// (mlx5_ib) write into guest memory for the device to read, and that the
// device writes back: send work queue elements (WQEs: the control segment
// and the data, inline, remote-address, atomic, XRC, datagram/address-vector
// and UMR segments behind it), receive WQEs (RQ, and SRQ with its
// next-pointer segment), and completion queue entries (CQEs, 64 or 128
// bytes, success and error) with their ownership rule. Names follow
// mlx5dv.h and include/linux/mlx5 (qp.h, cq.h, device.h), spelled as Go
// does: struct mlx5_wqe_ctrl_seg is CtrlSeg, MLX5_OPCODE_RDMA_WRITE is
// OpcodeRDMAWrite, MLX5_CQE_SYNDROME_WR_FLUSH_ERR is SyndromeWRFlushErr.
//
// It decodes bytes into Go values and encodes Go values into bytes; what the
// values mean is the device's business (package emu/mlx5), and so is the
// mapping between these numbers and the core's (emu/transport): this
// package imports the standard library only.
//
// Importers name it uverbs, the concept it holds for its model, beside
// uverbs/pvrdma.
//
// All integers are big-endian. Decoders take byte slices that were copied
// out of guest memory once; they never see guest memory itself, never
// panic, and bound every loop by the length they were given.
package mlx5
