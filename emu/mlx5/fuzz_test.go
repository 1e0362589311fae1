package mlx5

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
)

// writeLog is guest memory that records every write the device makes, in
// order: the fuzzer's oracle checks each against the places the device
// may write.
type writeLog struct {
	*dma.Flat
	writes []span
}

type span struct{ gpa, n uint64 }

func (w *writeLog) WriteAt(p []byte, gpa uint64) error {
	w.writes = append(w.writes, span{gpa, uint64(len(p))})
	return w.Flat.WriteAt(p, gpa)
}

func (w *writeLog) Access(gpa, n uint64, write bool, fn func([]byte)) error {
	if write {
		w.writes = append(w.writes, span{gpa, n})
	}
	return w.Flat.Access(gpa, n, write, fn)
}

// The fuzzer's guest: 64 KiB of RAM, the command queue in its first page
// (the fake driver's first allocation), and the mailbox image from
// fuzzImg on.
const (
	fuzzRAM = 0x10000
	fuzzImg = ramBase + 0x2000
)

// refChain is the spec's rule for one chain (§2.3), written apart from
// the device's walk, on a snapshot of RAM: the blocks a message of n bytes
// needs, or the delivery status that refuses it.
func refChain(ram []byte, ptr uint64, n uint32, token uint8, out bool) ([]uint64, ifc.DeliveryStatus) {
	lenErr, ptrErr := ifc.DeliveryInLengthErr, ifc.DeliveryInPtrAlignErr
	if out {
		lenErr, ptrErr = ifc.DeliveryOutLengthErr, ifc.DeliveryOutPtrAlignErr
	}
	var chain []uint64
	for need := int64(n) - 16; need > 0; need -= 512 {
		if ptr == 0 {
			return nil, lenErr
		}
		if ptr&1023 != 0 {
			return nil, ptrErr
		}
		for _, p := range chain {
			if p == ptr {
				return nil, ifc.DeliveryBadBlkNumErr
			}
		}
		if ptr < ramBase || ptr-ramBase > uint64(len(ram))-576 {
			return nil, ptrErr
		}
		b := ram[ptr-ramBase : ptr-ramBase+576]
		if binary.BigEndian.Uint32(b[568:]) != uint32(len(chain)) {
			return nil, ifc.DeliveryBadBlkNumErr
		}
		if b[573] != token {
			return nil, ifc.DeliveryTokErr
		}
		chain = append(chain, ptr)
		ptr = binary.BigEndian.Uint64(b[560:])
	}
	return chain, ifc.DeliveryOK
}

// refDeliver is the delivery status the spec gives a descriptor, and the
// output blocks of one that is delivered.
func refDeliver(ram []byte, lay ifc.CmdLayout) ([]uint64, ifc.DeliveryStatus) {
	switch {
	case lay.Type != 7:
		return nil, ifc.DeliveryCmdDescrErr
	case lay.InLen < 8 || lay.InLen > ifc.MaxCmdMsgSize:
		return nil, ifc.DeliveryInLengthErr
	case lay.OutLen < 8 || lay.OutLen > ifc.MaxCmdMsgSize:
		return nil, ifc.DeliveryOutLengthErr
	}
	if _, ds := refChain(ram, lay.InPtr, lay.InLen, lay.Token, false); ds != ifc.DeliveryOK {
		return nil, ds
	}
	return refChain(ram, lay.OutPtr, lay.OutLen, lay.Token, true)
}

// fuzzSeed is a good command whose chains lie in the image: in and out
// blocks, numbered and tokened as the driver does.
func fuzzSeed(inLen, outLen uint32, token uint8) (desc, img []byte) {
	return fuzzSeedOp(ifc.OpQueryHCACap, inLen, outLen, token)
}

func fuzzSeedOp(op ifc.Opcode, inLen, outLen uint32, token uint8) (desc, img []byte) {
	nIn, nOut := ifc.MsgBlocks(inLen), ifc.MsgBlocks(outLen)
	img = make([]byte, int(nIn+nOut)*1024)
	lay := ifc.CmdLayout{Type: 7, InLen: inLen, OutLen: outLen, Token: token}
	ifc.MboxInOpcode.Set(lay.In[:], uint32(op))
	chain := func(first, n uint32) uint64 {
		for k := range n {
			p := ifc.CmdProtBlock{BlockNum: k, Token: token}
			if k+1 < n {
				p.Next = fuzzImg + uint64(first+k+1)*1024
			}
			p.Encode(img[(first+k)*1024:])
		}
		if n == 0 {
			return 0
		}
		return fuzzImg + uint64(first)*1024
	}
	lay.InPtr, lay.OutPtr = chain(0, nIn), chain(nIn, nOut)
	desc = make([]byte, ifc.CmdLayoutSize)
	lay.Encode(desc)
	return desc, img
}

// FuzzCommand posts any descriptor over any mailbox image. Every post is
// answered (the ownership bit is cleared) with the delivery status the
// spec's rules give (refDeliver); the device writes only the descriptor's
// output bytes and the data of the output blocks of a delivered command,
// and the status byte, once and last; a delivered command's output is
// BAD_OP with its syndrome and zeros to its length unless the opcode is
// implemented, and an implemented command that fails writes its status
// and syndrome alone.
func FuzzCommand(f *testing.F) {
	for _, c := range []struct{ in, out uint32 }{{16, 16}, {16, 0x70}, {0x1010, 16}, {16, 0x1010}, {600, 1200}, {4, 16}, {17, 17}} {
		desc, img := fuzzSeed(c.in, c.out, 0x5a)
		f.Add(uint8(0), desc, img)
	}
	for _, op := range []ifc.Opcode{ifc.OpCreateTIS, ifc.OpEnableHCA, ifc.OpCreateEQ} {
		desc, img := fuzzSeedOp(op, 0x120, 16, 3)
		f.Add(uint8(1), desc, img)
	}
	desc, img := fuzzSeed(2000, 16, 1)
	binary.BigEndian.PutUint64(img[1024+560:], fuzzImg) // the second block loops to the first
	f.Add(uint8(7), desc, img)
	f.Fuzz(func(t *testing.T, slot uint8, desc, img []byte) {
		mem := &writeLog{Flat: dma.NewFlat(ramBase, fuzzRAM)}
		d := New(Config{Mem: mem, Log: quiet})
		defer d.Close()
		drv := mlx5test.New(d, mem.Flat)
		if err := drv.Enable(); err != nil {
			t.Fatal(err)
		}
		copy(mem.Mem[fuzzImg-ramBase:], img)
		var raw [ifc.CmdLayoutSize]byte
		copy(raw[:], desc)
		lay, _ := ifc.DecodeCmdLayout(raw[:])
		lay.StatusOwn |= ifc.CmdOwnerHW
		i := int(slot % 32)
		lay.Encode(drv.Bytes(drv.Slot(i), ifc.CmdLayoutSize))
		before := bytes.Clone(mem.Mem)
		outBlocks, want := refDeliver(before, lay)

		drv.Write32(ifc.InitSegCmdDbell, 1<<i)

		got, _ := ifc.DecodeCmdLayout(drv.Bytes(drv.Slot(i), ifc.CmdLayoutSize))
		if got.StatusOwn != byte(want)<<1 {
			t.Fatalf("status_own %#x, want delivery status %v (%#x) and the ownership bit clear", got.StatusOwn, want, uint8(want))
		}
		// Where the device may write, and that the status byte came last.
		status := drv.Slot(i) + ifc.CmdLayoutStatusOwn
		allowed := []span{{status, 1}}
		if want == ifc.DeliveryOK {
			allowed = append(allowed, span{drv.Slot(i) + ifc.CmdLayoutOut, ifc.CmdInlineSize})
			for _, b := range outBlocks {
				allowed = append(allowed, span{b, ifc.CmdDataBlockSize})
			}
		}
		for k, w := range mem.writes {
			if (w == span{status, 1}) != (k == len(mem.writes)-1) {
				t.Fatalf("write %d of %d at [%#x,+%d): the status byte must be written once, last", k, len(mem.writes), w.gpa, w.n)
			}
			if !inside(w, allowed) {
				t.Fatalf("write at [%#x,+%d) outside the descriptor's output, the output blocks' data and the status byte", w.gpa, w.n)
			}
		}
		after := mem.Mem
		for o := range after {
			if after[o] != before[o] && !inside(span{ramBase + uint64(o), 1}, allowed) {
				t.Fatalf("byte at %#x changed", ramBase+o)
			}
		}
		if want != ifc.DeliveryOK {
			return
		}
		for _, b := range outBlocks {
			if b < drv.Slot(i)+ifc.CmdLayoutSize && drv.Slot(i) < b+ifc.CmdDataBlockSize {
				return // an output block over the descriptor: the output wrote over itself
			}
		}
		out := drv.Gather(got.Out[:], outBlocks, int(lay.OutLen))
		var in [ifc.CmdInlineSize]byte
		copy(in[:], lay.In[:min(lay.InLen, ifc.CmdInlineSize)])
		if op := ifc.Opcode(ifc.MboxInOpcode.Get(in[:])); Implemented(op) {
			// An implemented command either succeeds or fails with a
			// status the driver knows, a syndrome of the device's, and
			// nothing else in its output.
			st := ifc.Status(ifc.MboxOutStatus.Get(out))
			if st == ifc.StatOK {
				return
			}
			if strings.HasPrefix(st.String(), "unknown") || ifc.MboxOutSyndrome.Get(out)>>16 != syndBase>>16 {
				t.Fatalf("%s: status %#x syndrome %#x", op, uint8(st), ifc.MboxOutSyndrome.Get(out))
			}
			if !allZero(out[min(len(out), ifc.MboxOutSize):]) || out[1]|out[2]|out[3] != 0 || len(out) > 8 && !allZero(out[8:min(len(out), ifc.MboxOutSize)]) {
				t.Fatalf("%s failed with more than its header: % x", op, out[:min(len(out), 32)])
			}
			return
		}
		exp := make([]byte, lay.OutLen)
		ifc.MboxOutStatus.Set(exp, uint32(ifc.StatBadOpErr))
		ifc.MboxOutSyndrome.Set(exp, SyndUnsupportedOpcode)
		if !bytes.Equal(out, exp) {
			t.Fatalf("output % x", out[:min(len(out), 32)])
		}
	})
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func inside(w span, allowed []span) bool {
	for _, a := range allowed {
		if w.gpa >= a.gpa && w.gpa+w.n <= a.gpa+a.n {
			return true
		}
	}
	return false
}
