package mlx5

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
)

// fuzzQPRAM holds the probes (1.8 MiB) and the run's command chains.
const fuzzQPRAM = 4 << 20

// qpWorld is what exists when FuzzCreateQP's CREATE_QP comes: the
// objects of mlx5_ib's probe and a CQ of the test's.
type qpWorld struct {
	pds, cqs, srqs, xrcds, uars []uint32
	ram                         uint64
}

// refCreateQP is the spec's CREATE_QP (§6.7.1, §11) written apart from the
// device, from the bytes of create_qp_in themselves (the qpc at 0x18,
// offsets absolute as the spec gives them): the status the device must
// answer for them in world w.
func refCreateQP(in []byte, w qpWorld) ifc.Status {
	dw := func(d, hi, lo uint) uint32 {
		return binary.BigEndian.Uint32(in[4*d:]) >> lo & (1<<(hi-lo+1) - 1)
	}
	st := uint32(in[0x19])
	pd := dw(7, 23, 0)
	logRQ, stride, noSQ, logSQ := dw(8, 22, 19), dw(8, 18, 16), dw(8, 15, 15), dw(8, 14, 11)
	uar := dw(9, 23, 0)
	lps := dw(11, 28, 24)
	snd, po, xrcd, rcv := dw(37, 23, 0), dw(42, 11, 6), dw(44, 23, 0), dw(45, 23, 0)
	dbr := binary.BigEndian.Uint64(in[0xb8:])
	rqType, srq := dw(49, 26, 24), dw(49, 23, 0)
	has := func(set []uint32, v uint32) bool { return slices.Contains(set, v) }
	inRAM := func(a, n uint64) bool { return a >= ramBase && a-ramBase <= w.ram && w.ram-(a-ramBase) >= n }
	switch {
	case !has([]uint32{0, 1, 2, 3, 7, 8, 0xc}, st), dw(2, 23, 0) != 0,
		rqType == 2 || rqType > 3,
		rqType == 0 && stride+4 > 9, // 16 << stride bytes <= max_wqe_sz_rq (512)
		lps > 18,
		!has(w.pds, pd),
		(noSQ == 0 || snd != 0) && !has(w.cqs, snd),
		(rqType != 3 || rcv != 0) && !has(w.cqs, rcv),
		(rqType == 1 || srq != 0) && !has(w.srqs, srq),
		xrcd != 0 && !has(w.xrcds, xrcd),
		noSQ == 0 && !has(w.uars, uar):
		return ifc.StatBadParamErr
	}
	var n uint64
	if rqType == 0 {
		n += uint64(16<<stride) << logRQ
	}
	if noSQ == 0 {
		n += 64 << logSQ
	}
	if n == 0 {
		return ifc.StatOK
	}
	if dbr%8 != 0 || !inRAM(dbr, 8) {
		return ifc.StatBadParamErr
	}
	page := uint64(4096) << lps
	off := uint64(po) * (page / 64)
	npages := (off + n + page - 1) / page
	if uint64(len(in)) < 0x110+8*npages {
		return ifc.StatBadInpLenErr
	}
	for i := range npages {
		a := binary.BigEndian.Uint64(in[0x110+8*i:])
		lo, hi := max(off, i*page)-i*page, min(off+n, (i+1)*page)-i*page
		if a%page != 0 || !inRAM(a+lo, hi-lo) {
			return ifc.StatBadParamErr
		}
	}
	return ifc.StatOK
}

// FuzzCreateQP: any QP context, input_qpn and page list on a function
// with mlx5_ib's probe done. The oracle: the status is the spec's
// (refCreateQP); a created QP has a QPN other than 0 and 1 and of 24
// bits, QUERY_QP returns the context as sent in state RST, it is
// destroyed once and never twice; a refused one leaves nothing: the
// object tables, their references and the pinned pages are as before.
func FuzzCreateQP(f *testing.F) {
	seed := func(a mlx5test.QPArgs, edit func(in []byte)) {
		mem := dma.NewFlat(ramBase, fuzzQPRAM)
		drv := mlx5test.New(nopFunction{}, mem)
		drv.Alloc(fuzzQPRAM-1<<20, 4096) // the seeds' buffers: in RAM (only their range is checked)
		in, _ := drv.CreateQPIn(a)
		if edit != nil {
			edit(in)
		}
		f.Add(in[0x18:0x100], uint32(0), in[0x110:])
	}
	// The probe's objects have these numbers (a sequential probe): PDs 1-3,
	// CQs 1-2 and the test's 3, SRQs 1 (XRC) and 2, XRCDs 1-2, UAR 16.
	rc := mlx5test.QPArgs{St: ifc.QPStRC, PD: 2, SndCQ: 3, RcvCQ: 3, SRQ: 2, XRCD: 2, LogRQ: 4, LogRQStride: 2, LogSQ: 6, UAR: FirstUAR}
	seed(rc, nil)
	ud := rc
	ud.St, ud.LogRQ, ud.LogSQ = ifc.QPStUD, 8, 8
	seed(ud, nil)
	srq := rc
	srq.RQType = ifc.RQTypeSRQ
	seed(srq, nil)
	tgt := mlx5test.QPArgs{St: ifc.QPStXRC, PD: 3, SndCQ: 2, RcvCQ: 2, RQType: ifc.RQTypeSRQ, SRQ: 1, XRCD: 1, NoSQ: true}
	seed(tgt, nil)
	seed(rc, func(in []byte) { ifc.QPCLogPageSize.Set(ifc.QPInQPC.Bytes(in), 1) })
	seed(rc, func(in []byte) { ifc.QPCPageOffset.Set(ifc.QPInQPC.Bytes(in), 63) })
	f.Fuzz(func(t *testing.T, qpc []byte, inputQPN uint32, pas []byte) {
		if len(pas) > 8*512 {
			pas = pas[:8*512]
		}
		mem := dma.NewFlat(ramBase, fuzzQPRAM)
		d := New(Config{Mem: mem, Log: quiet, SequentialQPNs: true})
		defer d.Close()
		drv := mlx5test.New(d, mem)
		ib := probeIB(t, drv)
		cq, err := drv.KernelCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		w := qpWorld{pds: []uint32{ib.UMRPD, ib.MADPD, ib.P0}, cqs: []uint32{ib.MADCQ.CQN, ib.C0.CQN, cq.CQN},
			srqs: []uint32{ib.S0.N, ib.S1.N}, xrcds: []uint32{ib.XRCD0, ib.XRCD1}, uars: []uint32{drv.UAR}, ram: fuzzQPRAM}
		if !slices.Equal(w.pds, []uint32{1, 2, 3}) || !slices.Equal(w.cqs, []uint32{1, 2, 3}) || drv.UAR != FirstUAR {
			t.Fatalf("the probe's objects moved: %+v: the seeds name others", w)
		}
		in := make([]byte, ifc.PASOffset+len(pas))
		ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateQP))
		copy(in[0x18:0x100], qpc)
		ifc.CreateQPInInputQPN.Set(in, inputQPN)
		copy(in[ifc.PASOffset:], pas)
		want := refCreateQP(in, w)

		d.core.Lock()
		pinned, n := d.fn.pins.Pinned(), d.fn.obj.count()
		refs := refSnapshot(&d.fn.obj)
		d.core.Unlock()
		out, err := drv.Exec(in, ifc.Linux612CmdSize)
		expectStatus(t, "CREATE_QP", err, want)
		if want == ifc.StatOK {
			qpn := ifc.ObjOut.Get(out)
			q := &mlx5test.QP{QPN: qpn}
			ctx, err := drv.QueryQP(q)
			if err != nil || qpn <= 1 || qpn >= 1<<24 {
				t.Fatalf("QPN %#x, QUERY_QP: %v", qpn, err)
			}
			sent := bytes.Clone(in[0x18:0x100])
			ifc.QPCState.Set(sent, ifc.QPStateRST)
			if !bytes.Equal(ctx, sent) {
				t.Fatalf("QUERY_QP qpc\n% x\nwant\n% x", ctx, sent)
			}
			if err := drv.DestroyQP(q); err != nil {
				t.Fatalf("DESTROY_QP: %v", err)
			}
			if err := drv.DestroyQP(q); !isStatus(err, ifc.StatBadResErr) {
				t.Fatalf("second DESTROY_QP: %v", err)
			}
		}
		d.core.Lock()
		defer d.core.Unlock()
		if d.fn.pins.Pinned() != pinned || d.fn.obj.count() != n || !slices.Equal(refSnapshot(&d.fn.obj), refs) {
			t.Fatalf("after: %d pages pinned, %d objects, references %v; before: %d, %d, %v",
				d.fn.pins.Pinned(), d.fn.obj.count(), refSnapshot(&d.fn.obj), pinned, n, refs)
		}
	})
}

// refSnapshot lists every object's reference count, table by table.
func refSnapshot(o *objects) []int {
	var out []int
	for _, h := range o.pds.Handles() {
		out = append(out, o.pds.Get(h).refs)
	}
	for _, h := range o.xrcds.Handles() {
		out = append(out, o.xrcds.Get(h).refs)
	}
	for _, h := range o.cqs.Handles() {
		out = append(out, o.cqs.Get(h).refs)
	}
	for _, h := range o.srqs.Handles() {
		out = append(out, o.srqs.Get(h).refs)
	}
	return out
}

// nopFunction is a device that answers nothing, for building seeds with
// the fake driver's builders.
type nopFunction struct{}

func (nopFunction) ReadRegion(int, uint64, []byte) error  { return nil }
func (nopFunction) WriteRegion(int, uint64, []byte) error { return nil }
