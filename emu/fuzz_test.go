package emu_test

import (
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/hcaemu/hcaemu/emu"
	"github.com/hcaemu/hcaemu/emu/emutest"
)

// FuzzCommands feeds sequences of raw 184-byte command requests (opcode
// forced into the valid range most of the time) to a probed device, with a
// GSI QP and a user context in place, then rings doorbells named by the
// input. The device must never panic and must still answer QUERY_PORT.
func FuzzCommands(f *testing.F) {
	seed := func(op uint32, body emutest.B) []byte {
		b := make([]byte, 184)
		binary.LittleEndian.PutUint32(b[8:], op)
		copy(b[16:], body)
		return b
	}
	f.Add(seed(emu.CmdQueryPort, emutest.NewBody(24).U8(16, 1)))
	f.Add(seed(emu.CmdCreatePD, emutest.NewBody(24).U32(16, 1)))
	f.Add(seed(emu.CmdCreateCQ, emutest.NewBody(40).U64(16, 0x5000).U32(28, 16).U32(32, 2)))
	f.Add(append(seed(emu.CmdModifyQP, emutest.NewBody(184).U32(16, 1).U32(20, 1).U32(24, 6)),
		seed(emu.CmdDestroyQP, emutest.NewBody(24).U32(16, 1))...))
	f.Add(seed(emu.CmdCreateQP, emutest.NewBody(80).U64(16, 0x5000).U32(24, 1).U32(28, 1).U32(32, 1).
		U32(40, 4).U32(44, 4).U32(48, 1).U32(52, 1).U16(68, 3).U16(70, 1).U8(75, 2)))
	f.Add(seed(emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1000).U64(24, 0x1000).U64(32, 0x5000).U32(40, 1).U32(44, 1).U32(52, 1)))
	f.Fuzz(func(t *testing.T, in []byte) {
		drv := emutest.New(2 << 20)
		dev := emu.New(emu.Config{Mem: drv.RAM, MSIX: drv.IRQ.Raise, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		defer dev.Close()
		drv.Dev = dev
		if err := drv.Probe(); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := drv.KernelGSI(); err != nil {
			t.Fatal(err)
		}
		drv.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, drv.BAR2>>12+1))
		for len(in) > 0 {
			n := min(len(in), 184)
			var body [184]byte
			copy(body[:], in[:n])
			in = in[n:]
			op := binary.LittleEndian.Uint32(body[8:])
			if op < 1<<31 {
				op %= 21
			}
			drv.Cmd(op, body[16:])
			// A doorbell named by the same bytes.
			drv.Doorbell(uint32(body[0])%4, uint64(body[1]%3)*4, binary.LittleEndian.Uint32(body[2:]))
		}
		dev.Sync()
		if _, err := drv.MustCmd(emu.CmdQueryPort, emutest.NewBody(24).U8(16, 1)); err != nil {
			t.Fatalf("device stopped serving: %v", err)
		}
	})
}
