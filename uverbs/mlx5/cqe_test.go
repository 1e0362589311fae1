package mlx5

import (
	"encoding/binary"
	"testing"
)

// providerWC is what the provider's cq.c makes of a CQE, read at the offsets
// of mlx5dv.h's struct mlx5_cqe64 and struct mlx5_err_cqe written out here
// independently of the package's encoder: mlx5_parse_cqe,
// handle_good_req, handle_responder, mlx5_handle_error_cqe.
type providerWC struct {
	valid                bool // get_sw_cqe
	opcode               uint8
	qpNum, uidx          uint32
	wqeCtr               uint16
	wcOpcode, status     uint32
	byteLen, imm, inv    uint32
	withImm, withInv     bool
	srcQP, slid, sl, dlp uint32
	grh                  bool
	pkeyIndex            uint32
	vendorErr            uint8
	solicited            bool
}

func providerPoll(cqe []byte, cqeSz int, n uint32, logSize uint8) providerWC {
	be := binary.BigEndian
	c := cqe
	if cqeSz == 128 {
		c = cqe[64:]
	}
	var wc providerWC
	op := c[63]
	wc.valid = op>>4 != 15 && uint32(op&1) == (n>>logSize)&1
	wc.opcode = op >> 4
	wc.solicited = op&2 != 0
	wc.qpNum = be.Uint32(c[56:]) & 0xffffff
	wc.uidx = be.Uint32(c[32:]) & 0xffffff
	wc.wqeCtr = be.Uint16(c[60:])
	switch wc.opcode {
	case 0: // MLX5_CQE_REQ
		switch be.Uint32(c[56:]) >> 24 {
		case 0x09:
			wc.withImm = true
			fallthrough
		case 0x08:
			wc.wcOpcode = 1
		case 0x0b:
			wc.withImm = true
			fallthrough
		case 0x0a, 0x01:
			wc.wcOpcode = 0
		case 0x10:
			wc.wcOpcode, wc.byteLen = 2, be.Uint32(c[44:])
		case 0x11:
			wc.wcOpcode, wc.byteLen = 3, 8
		case 0x12:
			wc.wcOpcode, wc.byteLen = 4, 8
		}
	case 1, 2, 3, 4:
		wc.byteLen = be.Uint32(c[44:])
		switch wc.opcode {
		case 1:
			wc.wcOpcode, wc.withImm, wc.imm = 129, true, be.Uint32(c[36:])
		case 2:
			wc.wcOpcode = 128
		case 3:
			wc.wcOpcode, wc.withImm, wc.imm = 128, true, be.Uint32(c[36:])
		case 4:
			wc.wcOpcode, wc.withInv, wc.inv = 128, true, be.Uint32(c[36:])
		}
		f := be.Uint32(c[24:])
		wc.slid = uint32(be.Uint16(c[22:]))
		wc.sl = f >> 24 & 0xf
		wc.srcQP = f & 0xffffff
		wc.dlp = uint32(c[17] & 0x7f)
		wc.grh = (f>>28)&3 != 0
		wc.pkeyIndex = be.Uint32(c[36:]) & 0xffff
	case 13, 14:
		wc.vendorErr = c[54]
		wc.status = map[uint8]uint32{1: 1, 2: 2, 4: 4, 5: 5, 6: 6, 0x10: 7, 0x11: 8, 0x12: 9, 0x13: 10, 0x14: 11, 0x15: 12, 0x16: 13, 0x22: 16}[c[55]]
		if wc.status == 0 {
			wc.status = 21
		}
	}
	return wc
}

// TestCQEGolden: a REQ CQE for a signaled RDMA READ, byte for byte.
func TestCQEGolden(t *testing.T) {
	c := CQE{SRQNUIdx: 0x000007, ByteCnt: 0x1000, SOpcode: OpcodeRDMARead, QPN: 0x000abc, WQECounter: 0x0102, Opcode: CQEReq, Owner: 1}
	b := make([]byte, 64)
	c.Encode(b)
	wantBytes(t, "REQ CQE", b, `
		00000000 00000000 00000000 00000000
		00000000 00000000 00000000 00000000
		00000007 00000000 00000000 00001000
		00000000 00000000 10000abc 01020001`)
	e := ErrCQE{SRQN: 0x000009, HWErrSynd: 0x11, HWSyndType: 0x2, VendorErrSynd: 0x68, Syndrome: SyndromeRemoteAccessErr,
		SWQEOpcode: OpcodeRDMAWrite, QPN: 0x000abc, WQECounter: 0x0003, Opcode: CQEReqErr}
	e.Encode(b)
	wantBytes(t, "error CQE", b, `
		00000000 00000000 00000000 00000000
		00000000 00000000 00000000 00000000
		00000009 00000000 00000000 00000000
		00000000 11206813 08000abc 000300d0`)
	if got := DecodeErrCQE(b); got != e {
		t.Fatalf("decoded %+v", got)
	}
}

// TestCQEProviderReads: for each opcode, the CQE the device writes is one
// the provider accepts at its counter and reads as the completion meant
// (wcOpcode in enum ibv_wc_opcode: SEND 0, RDMA_WRITE 1, RDMA_READ 2,
// COMP_SWAP 3, FETCH_ADD 4, RECV 128, RECV_RDMA_WITH_IMM 129).
func TestCQEProviderReads(t *testing.T) {
	type tc struct {
		name string
		cqe  CQE
		want providerWC
	}
	cases := []tc{
		{"SEND", CQE{SOpcode: OpcodeSend, Opcode: CQEReq}, providerWC{wcOpcode: 0}},
		{"SEND_INVAL", CQE{SOpcode: OpcodeSendInval, Opcode: CQEReq}, providerWC{wcOpcode: 0}},
		{"SEND_IMM", CQE{SOpcode: OpcodeSendImm, Opcode: CQEReq}, providerWC{wcOpcode: 0, withImm: true}},
		{"RDMA_WRITE", CQE{SOpcode: OpcodeRDMAWrite, Opcode: CQEReq}, providerWC{wcOpcode: 1}},
		{"RDMA_WRITE_IMM", CQE{SOpcode: OpcodeRDMAWriteImm, Opcode: CQEReq}, providerWC{wcOpcode: 1, withImm: true}},
		{"RDMA_READ", CQE{SOpcode: OpcodeRDMARead, Opcode: CQEReq, ByteCnt: 77}, providerWC{wcOpcode: 2, byteLen: 77}},
		{"ATOMIC_CS", CQE{SOpcode: OpcodeAtomicCS, Opcode: CQEReq}, providerWC{wcOpcode: 3, byteLen: 8}},
		{"ATOMIC_FA", CQE{SOpcode: OpcodeAtomicFA, Opcode: CQEReq}, providerWC{wcOpcode: 4, byteLen: 8}},
		{"RESP_SEND UD with GRH", CQE{Opcode: RespOpcode(false, false, false), ByteCnt: 140, SrcQPN: 0x123456, SL: 5, GRH: CQEGRH, SLID: 0x42, MLPath: 3, Solicited: true},
			providerWC{wcOpcode: 128, byteLen: 140, srcQP: 0x123456, sl: 5, grh: true, slid: 0x42, dlp: 3, solicited: true}},
		{"RESP_SEND_IMM", CQE{Opcode: RespOpcode(false, true, false), ByteCnt: 4, ImmInvalPkey: 0xa1b2c3d4},
			providerWC{wcOpcode: 128, byteLen: 4, withImm: true, imm: 0xa1b2c3d4, pkeyIndex: 0xc3d4}},
		{"RESP_SEND_INV", CQE{Opcode: RespOpcode(false, false, true), ImmInvalPkey: 0x1203},
			providerWC{wcOpcode: 128, withInv: true, inv: 0x1203, pkeyIndex: 0x1203}},
		{"RESP_WR_IMM", CQE{Opcode: RespOpcode(true, true, false), ByteCnt: 1 << 20, ImmInvalPkey: 9},
			providerWC{wcOpcode: 129, byteLen: 1 << 20, withImm: true, imm: 9, pkeyIndex: 9}},
		{"QP1 receive P_Key", CQE{Opcode: CQERespSend, ImmInvalPkey: 0xffff, SrcQPN: 1},
			providerWC{wcOpcode: 128, srcQP: 1, pkeyIndex: 0xffff}},
	}
	for _, size := range []int{CQESize64, CQESize128} {
		q := CQ{LogSize: 2, CQESize: size}
		buf := make([]byte, q.Size())
		for i := range 4 {
			buf[i*size+size-1] = OpOwnInit
		}
		for n, c := range cases {
			p := uint32(n) // the producer counter
			c.cqe.QPN, c.cqe.SRQNUIdx, c.cqe.WQECounter, c.cqe.Owner = 0xabc, 0x11, uint16(n), q.Owner(p)
			slot := buf[uint64(p)&3*uint64(size) : uint64(p)&3*uint64(size)+uint64(size)]
			if before := providerPoll(slot, size, p, q.LogSize); before.valid {
				t.Fatalf("%d/%s: slot valid before the write", size, c.name)
			}
			c.cqe.Encode(buf[q.Offset(p):])
			got := providerPoll(slot, size, p, q.LogSize)
			want := c.want
			want.valid, want.opcode, want.qpNum, want.uidx, want.wqeCtr = true, c.cqe.Opcode, 0xabc, 0x11, uint16(n)
			if got != want {
				t.Errorf("%d/%s: provider reads\n%+v\nwant\n%+v", size, c.name, got, want)
			}
			if !q.SoftwareOwns(buf[q.Offset(p)+OpOwnOffset], p) {
				t.Errorf("%d/%s: SoftwareOwns false", size, c.name)
			}
			// The next pass's software does not take it as new.
			if q.SoftwareOwns(buf[q.Offset(p)+OpOwnOffset], p+4) {
				t.Errorf("%d/%s: stale CQE owned on the next pass", size, c.name)
			}
			if d := DecodeCQE(buf[q.Offset(p):]); d != c.cqe {
				t.Errorf("%d/%s: round trip %+v", size, c.name, d)
			}
		}
	}
}

// TestErrCQEProviderReads: every syndrome the provider names reads as its
// ibv_wc_status, any other as IBV_WC_GENERAL_ERR; WCStatus agrees.
func TestErrCQEProviderReads(t *testing.T) {
	b := make([]byte, 64)
	for s := range 256 {
		e := ErrCQE{Syndrome: uint8(s), VendorErrSynd: 0x42, Opcode: CQERespErr, QPN: 5, WQECounter: 3}
		e.Encode(b)
		got := providerPoll(b, 64, 0, 4)
		if !got.valid || got.status != WCStatus(uint8(s)) || got.vendorErr != 0x42 || got.qpNum != 5 || got.wqeCtr != 3 {
			t.Errorf("syndrome %#x: provider reads %+v, WCStatus %d", s, got, WCStatus(uint8(s)))
		}
		if st := WCStatus(uint8(s)); st != WCGeneralErr {
			if back, ok := SyndromeFor(st); !ok || back != uint8(s) {
				t.Errorf("SyndromeFor(%d) = %#x %v, want %#x", st, back, ok, s)
			}
		}
	}
	if _, ok := SyndromeFor(0); ok {
		t.Error("a syndrome for success")
	}
}

// TestCQGeometry: slots, the 128-byte layout's second half, the owner bit
// (n >> log_cq_size) & 1, and the cqe_sz encoding.
func TestCQGeometry(t *testing.T) {
	q := CQ{LogSize: 3, CQESize: CQESize128}
	if q.Size() != 1024 || q.Offset(0) != 64 || q.Offset(9) != 128+64 || q.Owner(7) != 0 || q.Owner(8) != 1 || q.Owner(16) != 0 {
		t.Fatalf("size %d offsets %d %d owners %d %d %d", q.Size(), q.Offset(0), q.Offset(9), q.Owner(7), q.Owner(8), q.Owner(16))
	}
	q64 := CQ{LogSize: 0, CQESize: CQESize64}
	if q64.Offset(5) != 0 || q64.Owner(5) != 1 || !q64.Valid() || (CQ{LogSize: 25, CQESize: 64}).Valid() || (CQ{CQESize: 32}).Valid() {
		t.Fatal("64-byte geometry")
	}
	for sz, want := range map[uint8]int{0: 64, 1: 128, 2: 0} {
		if got, ok := CQESizeOf(sz); got != want || ok != (want != 0) {
			t.Errorf("CQESizeOf(%d) = %d %v", sz, got, ok)
		}
	}
	if OpOwnInit != 0xf0 {
		t.Errorf("OpOwnInit %#x", OpOwnInit)
	}
}
