// Package tests holds hcaemu's end-to-end tests: the whole stack (vfio-user
// server, device model, fabric) driven in-process by a fake driver over a
// real socket, and the real vmw_pvrdma driver and rdma-core tools in QEMU
// guests booted by "hcaemu run" (those need HCAEMU_E2E=1 and provisioning),
// and replays of recordings of such guests (replay_test.go, and
// replay_mlx5_test.go for the emulated ConnectX; no QEMU needed).
package tests
