package mlx5_test

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The package may not import the core (tests/deps_test.go: formats sit
// below it), so the device's mapping.go holds the table from the core's
// statuses and completion opcodes to these numbers. This test pins what
// that table must say, with the expected values written from mlx5dv.h and
// cq.h: every transport.Status has the syndrome the provider reports as
// that same ibv_wc_status, and every receive completion the CQE opcode
// handle_responder reads back as it.
func TestTransportCorrespondence(t *testing.T) {
	for _, c := range []struct {
		s        transport.Status
		syndrome uint8
	}{
		{transport.StatusLocLenErr, 0x01},
		{transport.StatusLocQPOpErr, 0x02},
		{transport.StatusLocProtErr, 0x04},
		{transport.StatusWRFlushErr, 0x05},
		{transport.StatusBadRespErr, 0x10},
		{transport.StatusRemInvReq, 0x12},
		{transport.StatusRemAccess, 0x13},
		{transport.StatusRemOpErr, 0x14},
		{transport.StatusRetryExc, 0x15},
		{transport.StatusRNRRetryExc, 0x16},
	} {
		got, ok := uverbs.SyndromeFor(uint32(c.s))
		if !ok || got != c.syndrome {
			t.Errorf("status %d: syndrome %#x %v, want %#x", c.s, got, ok, c.syndrome)
		}
		if back := uverbs.WCStatus(c.syndrome); back != uint32(c.s) {
			t.Errorf("syndrome %#x: the provider reports %d, want %d", c.syndrome, back, c.s)
		}
	}
	if _, ok := uverbs.SyndromeFor(uint32(transport.StatusSuccess)); ok {
		t.Error("success has a syndrome")
	}
	for _, c := range []struct {
		c    transport.Completion
		want uint8
	}{
		{transport.Completion{Opcode: transport.WCRecv, Recv: true}, 2},
		{transport.Completion{Opcode: transport.WCRecv, Recv: true, HasImm: true}, 3},
		{transport.Completion{Opcode: transport.WCRecv, Recv: true, Invalidated: true}, 4},
		{transport.Completion{Opcode: transport.WCRecvWriteImm, Recv: true, HasImm: true}, 1},
	} {
		got := uverbs.RespOpcode(c.c.Opcode == transport.WCRecvWriteImm, c.c.HasImm && !c.c.Invalidated, c.c.Invalidated)
		if got != c.want {
			t.Errorf("%+v: CQE opcode %d, want %d", c.c, got, c.want)
		}
	}
}
