// Package abi is the PVRDMA device ABI: the structures the Linux
// vmw_pvrdma driver and the device exchange through BAR1 registers and guest
// memory, as declared in drivers/infiniband/hw/vmw_pvrdma/pvrdma_dev_api.h and
// pvrdma_verbs.h. It holds the register offsets, the device shared region
// (DSR) with its capability block, the command header and response header,
// every request and response of the command channel (named after the C
// structs: pvrdma_cmd_create_qp is CmdCreateQP, pvrdma_cmd_create_qp_resp_v2
// is CmdCreateQPResp), the QP and address-vector attributes and their enums.
//
// Each structure is a plain Go value with Encode(b) and Decode(b) at the C
// layout (little endian, the offsets of the x86-64 build of the header);
// sizes are constants. The package decides nothing: what a field means to
// the emulated HCA is the business of package emu/pvrdma, the device. The
// formats a user process writes (WQEs, CQEs, ring state) are in package
// uverbs/pvrdma.
package abi
