package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/hcaemu/hcaemu/emu"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
)

// maxQPLimit is the most QPs a PVRDMA device can advertise: rdma-core's
// vmw_pvrdma provider sizes its QP table from the ucontext response's
// qp_tab_size (the device's max_qp) masked to 16 bits and indexes it by the
// CQE's QP handle, so 65536 would give it a table of none.
const maxQPLimit = 65535

// maxQPFlag is --max-qp: the max_qp the HCAs advertise (and hold).
type maxQPFlag struct{ n uint32 }

func (f *maxQPFlag) String() string {
	if f == nil || f.n == 0 {
		return strconv.Itoa(int(emu.DefaultCaps().MaxQP))
	}
	return strconv.Itoa(int(f.n))
}

func (f *maxQPFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 2 || n > maxQPLimit {
		return fmt.Errorf("not a QP count in 2..%d (2: the GSI QP and one more; %d: what rdma-core's vmw_pvrdma provider can index)", maxQPLimit, maxQPLimit)
	}
	f.n = uint32(n)
	return nil
}

func registerMaxQPFlag(fs *flag.FlagSet) *maxQPFlag {
	f := &maxQPFlag{}
	fs.Var(f, "max-qp", fmt.Sprintf("QPs each HCA holds and advertises (max_qp), 2..%d (default 1024); more QPs leave fewer random bits in a QPN (24 bits in all, the handle's below)", maxQPLimit))
	return f
}

// caps is the device capabilities for the flag: nil (the defaults) unless
// it was given.
func (f *maxQPFlag) caps() *pvrdma.DeviceCaps {
	if f == nil || f.n == 0 {
		return nil
	}
	caps := emu.DefaultCaps()
	caps.MaxQP = f.n
	return &caps
}
