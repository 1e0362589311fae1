package pvrdma

import "github.com/hcaemu/hcaemu/emu/pvrdma/abi"

// DefaultCaps are the capabilities of the emulated HCA (pvrdma.md §5.3,
// recommended column): the pvrdma_device_caps block the device writes into
// the DSR when the driver loads it. The same values bound every resource the
// guest can create. NodeGUID is filled from the port's MAC.
func DefaultCaps() abi.DeviceCaps {
	return abi.DeviceCaps{
		FWVer:           1 << 32, // "1.0.000"
		MaxMRSize:       1 << 30, // one page directory: 262144 pages
		PageSizeCap:     4096,
		VendorID:        0x15AD,
		VendorPartID:    0x0820,
		HWVer:           1,
		MaxQP:           1024,
		MaxQPWR:         4096,
		MaxSGE:          16,
		MaxSGERd:        16,
		MaxCQ:           2048,
		MaxCQE:          16384,
		MaxMR:           4096,
		MaxPD:           1024,
		MaxQPRdAtom:     16,
		MaxResRdAtom:    1024 * 16,
		MaxQPInitRdAtom: 16,
		MaxAH:           4096,
		MaxSRQ:          1024,
		MaxSRQWR:        4096,
		MaxSRQSGE:       16,
		MaxUAR:          512,
		GIDTblLen:       16,
		MaxPKeys:        1,
		LocalCAAckDelay: 15,
		PhysPortCnt:     1,
		Mode:            abi.DeviceModeRoCE,
		GIDTypes:        abi.GIDTypeFlagRoCEv2,
		// Atomics (CMP_SWP, FETCH_ADD) and the memory management extensions
		// (LOCAL_INV, SEND_WITH_INV, FAST_REG_MR).
		AtomicOps:             abi.AtomicOpCompSwap | abi.AtomicOpFetchAdd,
		BMMEFlags:             abi.BMMEFlagLocalInv | abi.BMMEFlagRemoteInv | abi.BMMEFlagFastRegWR,
		MaxFastRegPageListLen: maxFRMRPages,
	}
}

// EUI64 derives a node GUID from a MAC as QEMU did: insert FF:FE in the
// middle and flip the universal/local bit.
func EUI64(mac [6]byte) [8]byte {
	return [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]}
}

// roceOverhead is what a RoCEv2 packet adds to its payload inside an
// Ethernet MTU at most: an IPv6 header (the larger IP header), UDP, BTH, the
// largest extension headers (XRC's and AtomicETH's, as Linux counts them)
// and the ICRC: the rule Linux applies to a RoCE port's netdev
// (iboe_get_mtu), so that an emulated port and soft-RoCE on the same
// segment agree on the active MTU.
const roceOverhead = 40 + 8 + 12 + 4 + 28 + 4

// ActiveMTU is the active IB MTU (enum pvrdma_mtu) of a port on an
// Ethernet segment of MTU bytes (0: 1500): the largest IB MTU whose packets
// fit. 1500 gives 1024; 9000 gives 4096.
func ActiveMTU(mtu int) uint32 {
	if mtu == 0 {
		mtu = 1500
	}
	payload := mtu - roceOverhead
	for m := uint32(abi.MTU4096); m > abi.MTU256; m-- {
		if payload >= 128<<m {
			return m
		}
	}
	return abi.MTU256
}
