package mlx5

import (
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
)

// fuzzEQRAM is one probe's worth of guest RAM (the async EQ is 512 KiB).
const fuzzEQRAM = 2 << 20

// refCreateEQ is the spec's CREATE_EQ (§3.4) on a probed function, written
// apart from the device from the eqc bytes themselves: the status the
// device must answer for an EQ context, event bitmask word 0 and PAS of
// n bytes, with uar the kernel's only UAR, the command EQ present, and
// guest RAM at [ramBase, ramBase+ram).
func refCreateEQ(eqc []byte, mask0 uint64, pas []byte, uar uint32, ram uint64) ifc.Status {
	logSize := uint64(eqc[0x0c] & 0x1f)
	uarPage := uint32(eqc[0x0d])<<16 | uint32(eqc[0x0e])<<8 | uint32(eqc[0x0f])
	intr := uint32(eqc[0x16]&0x0f)<<8 | uint32(eqc[0x17])
	lps := uint64(eqc[0x18] & 0x1f)
	pageOffset := (eqc[0x0a]&0x0f)<<2 | eqc[0x0b]>>6
	ec := eqc[0x01]&0x04 != 0
	switch {
	case logSize > 15, ec, intr >= DefaultVectors, lps > 18, pageOffset != 0, uarPage != uar,
		mask0&(1<<0x0a) != 0:
		return ifc.StatBadParamErr
	}
	ring := uint64(64) << logSize
	page := uint64(4096) << lps
	n := (ring + page - 1) / page
	if uint64(len(pas)) < 8*n {
		return ifc.StatBadInpLenErr
	}
	for i := range n {
		a := binary.BigEndian.Uint64(pas[8*i:])
		used := min(page, ring-i*page)
		if a%page != 0 || a < ramBase || a-ramBase > ram || ram-(a-ramBase) < used {
			return ifc.StatBadParamErr
		}
	}
	return ifc.StatOK
}

// FuzzCreateEQ: any EQ context, event bitmask and PAS on a probed
// function in event mode. The oracle: the status is the spec's
// (refCreateEQ), a created EQ gets the lowest free number (2: the probe
// holds 0 and 1) and is destroyed once, never twice; the device writes
// nothing but the command's descriptor and output chain and the one CMD
// EQE of its completion (an EQ's pages are never written at creation);
// the probe's EQs are untouched and the command EQ keeps working.
func FuzzCreateEQ(f *testing.F) {
	seed := func(logSize, lps uint8, pages int, stride uint64) ([]byte, []byte) {
		eqc := make([]byte, ifc.EQCSize)
		ifc.EQCLogEQSize.Set(eqc, uint32(logSize))
		ifc.EQCLogPageSize.Set(eqc, uint32(lps))
		ifc.EQCUARPage.Set(eqc, FirstUAR)
		ifc.EQCIntr.Set(eqc, 1)
		pas := make([]byte, 8*pages)
		for i := range pages {
			binary.BigEndian.PutUint64(pas[8*i:], ramBase+fuzzEQRAM-uint64(pages-i)*stride)
		}
		return eqc, pas
	}
	for _, c := range []struct {
		log, lps uint8
		pages    int
		stride   uint64
	}{{10, 0, 16, 4096}, {6, 0, 1, 4096}, {8, 1, 2, 8192}, {10, 0, 15, 4096}, {7, 0, 2, 2048}, {16, 0, 1, 4096}} {
		eqc, pas := seed(c.log, c.lps, c.pages, c.stride)
		f.Add(eqc, uint64(0), pas)
	}
	eqc, pas := seed(6, 0, 1, 4096)
	f.Add(eqc, uint64(1<<0x0a|1<<0x09), pas)
	f.Fuzz(func(t *testing.T, eqc []byte, mask0 uint64, pas []byte) {
		if len(pas) > 8*1024 {
			pas = pas[:8*1024]
		}
		mem := &writeLog{Flat: dma.NewFlat(ramBase, fuzzEQRAM)}
		d := New(Config{Mem: mem, Log: quiet})
		defer d.Close()
		drv := mlx5test.New(d, mem.Flat)
		if err := drv.Probe(); err != nil {
			t.Fatal(err)
		}
		var ctx [ifc.EQCSize]byte
		copy(ctx[:], eqc)
		in := make([]byte, ifc.CreateEQInSize+len(pas))
		ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateEQ))
		copy(ifc.CreateEQInEQContextEntry.Bytes(in), ctx[:])
		ifc.CreateEQInEventBitmask(0).Set64(in, mask0)
		copy(in[ifc.CreateEQInPAS:], pas)
		want := refCreateEQ(ctx[:], mask0, pas, drv.UAR, fuzzEQRAM)

		mark := drv.Alloc(0, 1024)                    // Exec's chains come after this
		eqeAt := drv.EQEAddr(drv.CmdEQ, drv.CmdEQ.CI) // the completion's EQE
		mem.writes = nil
		out, err := drv.Exec(in, ifc.CreateEQOutSize)
		end := drv.Alloc(0, 1)
		for _, w := range mem.writes {
			ok := inside(w, []span{{drv.Slot(0), ifc.CmdLayoutSize}, {mark, end - mark}, {eqeAt, ifc.EQESize}})
			if !ok {
				t.Fatalf("write at [%#x,+%d): outside the command, its chains and its CMD EQE", w.gpa, w.n)
			}
		}
		expectStatus(t, "CREATE_EQ", err, want)
		destroy := mboxIn(ifc.OpDestroyEQ, 0, 16)
		ifc.DestroyEQInEQNumber.Set(destroy, 2)
		if want == ifc.StatOK {
			if eqn := ifc.CreateEQOutEQNumber.Get(out); eqn != 2 {
				t.Fatalf("EQ number %d, want 2", eqn)
			}
			if _, err := drv.Exec(destroy, 16); err != nil {
				t.Fatalf("DESTROY_EQ: %v", err)
			}
		}
		if _, err := drv.Exec(destroy, 16); !isStatus(err, ifc.StatBadResErr) {
			t.Fatalf("DESTROY_EQ of no EQ: %v", err)
		}
		d.core.Lock()
		n := len(d.fn.eqs)
		d.core.Unlock()
		if n != 2 {
			t.Fatalf("%d EQs after, want the probe's 2", n)
		}
		if _, err := drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), ifc.QueryISSIOutSize); err != nil {
			t.Fatal(err)
		}
	})
}
