package roce

import (
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOpcodeTable checks every row of spec §2 and that nothing else is
// listed.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		op      Opcode
		name    string
		hdrs    ExtHeaders
		hlen    int // bytes after the BTH
		payload PayloadRule
		rq      bool
	}
	rows := []row{
		{0x00, "RC_SEND_FIRST", 0, 0, PayloadFull, true},
		{0x01, "RC_SEND_MIDDLE", 0, 0, PayloadFull, false},
		{0x02, "RC_SEND_LAST", 0, 0, PayloadLast, false},
		{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", HasImmDt, 4, PayloadLast, false},
		{0x04, "RC_SEND_ONLY", 0, 0, PayloadOnly, true},
		{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", HasImmDt, 4, PayloadOnly, true},
		{0x06, "RC_RDMA_WRITE_FIRST", HasRETH, 16, PayloadFull, false},
		{0x07, "RC_RDMA_WRITE_MIDDLE", 0, 0, PayloadFull, false},
		{0x08, "RC_RDMA_WRITE_LAST", 0, 0, PayloadLast, false},
		{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, 4, PayloadLast, true},
		{0x0A, "RC_RDMA_WRITE_ONLY", HasRETH, 16, PayloadOnly, false},
		{0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, 20, PayloadOnly, true},
		{0x0C, "RC_RDMA_READ_REQUEST", HasRETH, 16, PayloadNone, false},
		{0x0D, "RC_RDMA_READ_RESPONSE_FIRST", HasAETH, 4, PayloadFull, false},
		{0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, 0, PayloadFull, false},
		{0x0F, "RC_RDMA_READ_RESPONSE_LAST", HasAETH, 4, PayloadLast, false},
		{0x10, "RC_RDMA_READ_RESPONSE_ONLY", HasAETH, 4, PayloadOnly, false},
		{0x11, "RC_ACKNOWLEDGE", HasAETH, 4, PayloadNone, false},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, 12, PayloadNone, false},
		{0x13, "RC_COMPARE_SWAP", HasAtomicETH, 28, PayloadNone, false},
		{0x14, "RC_FETCH_ADD", HasAtomicETH, 28, PayloadNone, false},
		{0x16, "RC_SEND_LAST_WITH_INVALIDATE", HasIETH, 4, PayloadLast, false},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", HasIETH, 4, PayloadOnly, true},
		{0x1C, "RC_FLUSH", HasFETH | HasRETH, 20, PayloadNone, false},
		{0x1D, "RC_ATOMIC_WRITE", HasRETH, 16, PayloadAtomic8, false},
		{0x20, "UC_SEND_FIRST", 0, 0, PayloadFull, true},
		{0x21, "UC_SEND_MIDDLE", 0, 0, PayloadFull, false},
		{0x22, "UC_SEND_LAST", 0, 0, PayloadLast, false},
		{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", HasImmDt, 4, PayloadLast, false},
		{0x24, "UC_SEND_ONLY", 0, 0, PayloadOnly, true},
		{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", HasImmDt, 4, PayloadOnly, true},
		{0x26, "UC_RDMA_WRITE_FIRST", HasRETH, 16, PayloadFull, false},
		{0x27, "UC_RDMA_WRITE_MIDDLE", 0, 0, PayloadFull, false},
		{0x28, "UC_RDMA_WRITE_LAST", 0, 0, PayloadLast, false},
		{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, 4, PayloadLast, true},
		{0x2A, "UC_RDMA_WRITE_ONLY", HasRETH, 16, PayloadOnly, false},
		{0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, 20, PayloadOnly, true},
		{0x64, "UD_SEND_ONLY", HasDETH, 8, PayloadOnly, true},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", HasDETH | HasImmDt, 12, PayloadOnly, true},
		{0xA0, "XRC_SEND_FIRST", HasXRCETH, 4, PayloadFull, true},
		{0xA1, "XRC_SEND_MIDDLE", HasXRCETH, 4, PayloadFull, false},
		{0xA2, "XRC_SEND_LAST", HasXRCETH, 4, PayloadLast, false},
		{0xA3, "XRC_SEND_LAST_WITH_IMMEDIATE", HasXRCETH | HasImmDt, 8, PayloadLast, false},
		{0xA4, "XRC_SEND_ONLY", HasXRCETH, 4, PayloadOnly, true},
		{0xA5, "XRC_SEND_ONLY_WITH_IMMEDIATE", HasXRCETH | HasImmDt, 8, PayloadOnly, true},
		{0xA6, "XRC_RDMA_WRITE_FIRST", HasXRCETH | HasRETH, 20, PayloadFull, false},
		{0xA7, "XRC_RDMA_WRITE_MIDDLE", HasXRCETH, 4, PayloadFull, false},
		{0xA8, "XRC_RDMA_WRITE_LAST", HasXRCETH, 4, PayloadLast, false},
		{0xA9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", HasXRCETH | HasImmDt, 8, PayloadLast, true},
		{0xAA, "XRC_RDMA_WRITE_ONLY", HasXRCETH | HasRETH, 20, PayloadOnly, false},
		{0xAB, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasXRCETH | HasRETH | HasImmDt, 24, PayloadOnly, true},
		{0xAC, "XRC_RDMA_READ_REQUEST", HasXRCETH | HasRETH, 20, PayloadNone, false},
		{0xAD, "XRC_RDMA_READ_RESPONSE_FIRST", HasAETH, 4, PayloadFull, false},
		{0xAE, "XRC_RDMA_READ_RESPONSE_MIDDLE", 0, 0, PayloadFull, false},
		{0xAF, "XRC_RDMA_READ_RESPONSE_LAST", HasAETH, 4, PayloadLast, false},
		{0xB0, "XRC_RDMA_READ_RESPONSE_ONLY", HasAETH, 4, PayloadOnly, false},
		{0xB1, "XRC_ACKNOWLEDGE", HasAETH, 4, PayloadNone, false},
		{0xB2, "XRC_ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, 12, PayloadNone, false},
		{0xB3, "XRC_COMPARE_SWAP", HasXRCETH | HasAtomicETH, 32, PayloadNone, false},
		{0xB4, "XRC_FETCH_ADD", HasXRCETH | HasAtomicETH, 32, PayloadNone, false},
		{0xB6, "XRC_SEND_LAST_WITH_INVALIDATE", HasXRCETH | HasIETH, 8, PayloadLast, false},
		{0xB7, "XRC_SEND_ONLY_WITH_INVALIDATE", HasXRCETH | HasIETH, 8, PayloadOnly, true},
		{0x81, "CNP", HasCNPPad, 16, PayloadNone, false},
	}
	listed := map[Opcode]bool{}
	for _, r := range rows {
		listed[r.op] = true
		info, ok := r.op.Info()
		if !ok {
			t.Errorf("%#x not known", uint8(r.op))
			continue
		}
		got := row{r.op, info.Name, info.Headers, info.Headers.Len(), info.Payload, info.ConsumesRQ}
		if diff := cmp.Diff(r, got, cmp.AllowUnexported(row{})); diff != "" {
			t.Errorf("%#x (-spec +table):\n%s", uint8(r.op), diff)
		}
		if r.op.HeaderLen() != BTHSize+r.hlen || info.HeaderLen() != BTHSize+r.hlen {
			t.Errorf("%v: HeaderLen %d", r.op, r.op.HeaderLen())
		}
		if r.op.String() != r.name {
			t.Errorf("%#x String = %q", uint8(r.op), r.op.String())
		}
		wantT := map[Opcode]Transport{0: TransportRC, 0x20: TransportUC, 0x60: TransportUD, 0x80: TransportCNP, 0xA0: TransportXRC}[r.op&0xE0]
		if r.op.Transport() != wantT {
			t.Errorf("%v: transport %v", r.op, r.op.Transport())
		}
		if info.Response != (r.op&^0xA0 >= 0x0D && r.op&^0xA0 <= 0x12 && r.op&0x40 == 0) {
			t.Errorf("%v: Response = %v", r.op, info.Response)
		}
	}
	for o := range 256 {
		op := Opcode(o)
		if !listed[op] && (op.Valid() || op.HeaderLen() != -1) {
			t.Errorf("%#x is not in spec §2 but is valid", o)
		}
	}
	if s := Opcode(0x40).String(); s != "Opcode(0x40)" {
		t.Errorf("String of unknown opcode = %q", s)
	}
	if s := (HasRETH | HasImmDt).String(); s != "RETH+ImmDt" {
		t.Errorf("ExtHeaders.String = %q", s)
	}
}

func TestCheckPayloadLen(t *testing.T) {
	cases := []struct {
		op   Opcode
		n    int
		pmtu int
		ok   bool
	}{
		{RCSendFirst, 1024, 1024, true},
		{RCSendFirst, 1000, 1024, false},
		{RCSendFirst, 512, 1024, false},
		{RCSendFirst, 512, 0, true},
		{RCSendFirst, 500, 0, false},
		{RCSendMiddle, 4096, 0, true},
		{RCSendLast, 0, 1024, false},
		{RCSendLast, 1, 1024, true},
		{RCSendLast, 1025, 1024, false},
		{RCSendOnly, 0, 256, true},
		{RCSendOnly, 257, 256, false},
		{RCSendOnly, 4096, 0, true},
		{RCSendOnly, 4097, 0, false},
		{RCAcknowledge, 0, 0, true},
		{RCAcknowledge, 4, 0, false},
		{RCRDMAReadRequest, 4, 1024, false},
		{RCAtomicWrite, 8, 1024, true},
		{RCAtomicWrite, 4, 1024, false},
		{UDSendOnly, 2048, 2048, true},
		{RCSendOnly, 100, 1000, false}, // invalid PMTU
	}
	for _, c := range cases {
		err := CheckPayloadLen(c.op, c.n, c.pmtu)
		if (err == nil) != c.ok {
			t.Errorf("CheckPayloadLen(%v, %d, %d) = %v, want ok=%v", c.op, c.n, c.pmtu, err, c.ok)
		}
	}
	if err := CheckPayloadLen(0x40, 0, 0); err != ErrUnknownOpcode {
		t.Errorf("unknown opcode: %v", err)
	}
}

func TestSyndromes(t *testing.T) {
	cases := []struct {
		s    Syndrome
		want Syndrome
		typ  SyndromeType
		code uint8
		str  string
	}{
		{ACKSyndrome(31), 0x1F, SyndromeACK, 31, "ACK(credits invalid)"},
		{ACKSyndrome(0), 0x00, SyndromeACK, 0, "ACK(credits 0)"},
		{ACKSyndrome(9), 0x09, SyndromeACK, 9, "ACK(credits 24)"},
		{RNRNAKSyndrome(14), 0x2E, SyndromeRNRNAK, 14, "RNR NAK(1.28ms)"},
		{RNRNAKSyndrome(0), 0x20, SyndromeRNRNAK, 0, "RNR NAK(655.36ms)"},
		{NAKSyndrome(NAKPSNSequenceError), 0x60, SyndromeNAK, 0, "NAK(PSN sequence error)"},
		{NAKSyndrome(NAKInvalidRequest), 0x61, SyndromeNAK, 1, "NAK(invalid request)"},
		{NAKSyndrome(NAKRemoteAccessError), 0x62, SyndromeNAK, 2, "NAK(remote access error)"},
		{NAKSyndrome(NAKRemoteOperationalErr), 0x63, SyndromeNAK, 3, "NAK(remote operational error)"},
		{NAKSyndrome(NAKInvalidRDRequest), 0x64, SyndromeNAK, 4, "NAK(invalid RD request)"},
		{Syndrome(0x45), 0x45, SyndromeReserved, 5, "Syndrome(0x45)"},
		{Syndrome(0x9F), 0x9F, SyndromeReserved, 31, "Syndrome(0x9f)"},
	}
	for _, c := range cases {
		if c.s != c.want || c.s.Type() != c.typ || c.s.Code() != c.code || c.s.String() != c.str {
			t.Errorf("syndrome %#x: type %v code %d %q; want %#x %v %d %q",
				uint8(c.s), c.s.Type(), c.s.Code(), c.s.String(), uint8(c.want), c.typ, c.code, c.str)
		}
		if c.s.IsACK() != (c.typ == SyndromeACK) || c.s.IsRNRNAK() != (c.typ == SyndromeRNRNAK) || c.s.IsNAK() != (c.typ == SyndromeNAK) {
			t.Errorf("syndrome %#x: Is* predicates disagree with Type", uint8(c.s))
		}
	}
	if SyndromeACKNoCredit != 0x1F || SyndromePSNSequenceError != 0x60 || SyndromeInvalidRequest != 0x61 ||
		SyndromeRemoteAccess != 0x62 || SyndromeRemoteOperational != 0x63 || SyndromeInvalidRDRequest != 0x64 {
		t.Error("named syndromes disagree with spec §1.8")
	}
	if RNRNAKSyndrome(14).RNRTimerCode() != 14 || NAKSyndrome(2).NAKCode() != NAKRemoteAccessError || ACKSyndrome(7).CreditCode() != 7 {
		t.Error("code accessors")
	}
}

func TestCreditCount(t *testing.T) {
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
		256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for code, w := range want {
		n, ok := CreditCount(uint8(code))
		if !ok || n != w {
			t.Errorf("CreditCount(%d) = %d, %v; want %d", code, n, ok, w)
		}
	}
	if _, ok := CreditCount(31); ok {
		t.Error("code 31 should be invalid")
	}
	if _, ok := CreditCount(200); ok {
		t.Error("code 200 should be invalid")
	}
}

func TestRNRTimer(t *testing.T) {
	// Spec §3.7, in ms.
	want := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12,
		0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
		2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
		40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	for code, ms := range want {
		w := time.Duration(ms*1e5+0.5) * 10 * time.Nanosecond
		if got := RNRTimer(uint8(code)); got != w {
			t.Errorf("RNRTimer(%d) = %v, want %v", code, got, w)
		}
		if code != 0 && RNRTimerCode(w) != uint8(code) {
			t.Errorf("RNRTimerCode(%v) = %d, want %d", w, RNRTimerCode(w), code)
		}
	}
	if RNRTimerCode(0) != 1 || RNRTimerCode(time.Second) != 0 || RNRTimerCode(11*time.Microsecond) != 2 {
		t.Error("RNRTimerCode rounding")
	}
	if RNRTimer(14|0x20) != RNRTimer(14) {
		t.Error("RNRTimer must ignore bits above 4")
	}
}

func TestLocalACKTimeout(t *testing.T) {
	// Spec §3.6 table (rounded values).
	cases := []struct {
		timeout uint8
		approx  time.Duration
	}{
		{8, 1049 * time.Microsecond}, {10, 4194 * time.Microsecond}, {12, 16780 * time.Microsecond},
		{14, 67110 * time.Microsecond}, {16, 268400 * time.Microsecond}, {17, 536900 * time.Microsecond},
		{18, 1074 * time.Millisecond}, {19, 2147 * time.Millisecond}, {20, 4295 * time.Millisecond},
		{22, 17180 * time.Millisecond}, {31, 8796 * time.Second},
	}
	for _, c := range cases {
		got := LocalACKTimeout(c.timeout)
		if got != 4096*time.Nanosecond*(1<<c.timeout) {
			t.Errorf("LocalACKTimeout(%d) = %v", c.timeout, got)
		}
		if d := got - c.approx; d < -c.approx/1000 || d > c.approx/1000 {
			t.Errorf("LocalACKTimeout(%d) = %v, spec table says about %v", c.timeout, got, c.approx)
		}
	}
	if LocalACKTimeout(0) != 0 {
		t.Error("timeout 0 must mean never (0)")
	}
}

func TestPSN(t *testing.T) {
	if PSNAdd(0xFFFFFF, 1) != 0 || PSNAdd(0, -1) != 0xFFFFFF || PSNAdd(0xFFFFF0, 0x20) != 0x10 {
		t.Error("PSNAdd wrap")
	}
	diffs := []struct {
		a, b uint32
		d    int32
	}{
		{0, 0, 0}, {1, 0, 1}, {0, 1, -1}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1},
		{0x123456, 0x123450, 6}, {0x7FFFFF, 0, 0x7FFFFF}, {0x800000, 0, -0x800000},
		{0x000005, 0xFFFFF0, 0x15}, {0xFFFFF0, 0x000005, -0x15},
	}
	for _, c := range diffs {
		if got := PSNDiff(c.a, c.b); got != c.d {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	if !PSNBefore(0xFFFFFF, 0) || PSNBefore(0, 0xFFFFFF) || !PSNAfter(0, 0xFFFFFF) {
		t.Error("PSNBefore/After across wrap")
	}
	classes := []struct {
		psn, epsn uint32
		c         PSNClass
	}{
		{10, 10, PSNExpected}, {9, 10, PSNDuplicate}, {11, 10, PSNOutOfSequence},
		{0xFFFFFF, 0, PSNDuplicate}, {0, 0xFFFFFF, PSNOutOfSequence},
		{0x800000, 0, PSNDuplicate}, {0x7FFFFF, 0, PSNOutOfSequence},
	}
	for _, c := range classes {
		if got := ClassifyPSN(c.psn, c.epsn); got != c.c {
			t.Errorf("ClassifyPSN(%#x, %#x) = %v, want %v", c.psn, c.epsn, got, c.c)
		}
	}
	if !PSNInRange(0xFFFFFE, 0xFFFFFD, 2) || !PSNInRange(1, 0xFFFFFD, 2) || PSNInRange(3, 0xFFFFFD, 2) ||
		PSNInRange(0xFFFFFC, 0xFFFFFD, 2) || !PSNInRange(5, 5, 5) {
		t.Error("PSNInRange")
	}
	if ReadPSNCount(0, 1024) != 1 || ReadPSNCount(1024, 1024) != 1 || ReadPSNCount(1025, 1024) != 2 ||
		ReadPSNCount(600, 256) != 3 || ReadPSNCount(0xFFFFFFFF, 256) != 1<<24 {
		t.Error("ReadPSNCount")
	}
}

func TestBTHAccessors(t *testing.T) {
	b := BTH(make([]byte, BTHSize))
	f := BTHFields{Opcode: RCSendLast, SE: true, MigReq: true, PadCount: 3, TVer: 0, PKey: 0x7FFF,
		FECN: true, BECN: true, DestQP: 0xABCDEF, AckReq: true, PSN: 0xFEDCBA}
	b.Encode(&f)
	if diff := cmp.Diff(f, b.Fields()); diff != "" {
		t.Errorf("round trip:\n%s", diff)
	}
	b.SetSE(false)
	b.SetMigReq(false)
	b.SetPadCount(1)
	b.SetTVer(2)
	b.SetFECN(false)
	b.SetAckReq(false)
	b.SetDestQP(0x1000012)
	b.SetPSN(0x1000000)
	b.SetPKey(0xFFFF)
	b.SetOpcode(RCSendFirst)
	b.SetBECN(false)
	want := BTHFields{Opcode: RCSendFirst, PadCount: 1, TVer: 2, PKey: 0xFFFF, DestQP: 0x12}
	if diff := cmp.Diff(want, b.Fields()); diff != "" {
		t.Errorf("setters:\n%s", diff)
	}
	b[4] |= 0x3F
	b[8] |= 0x7F
	if b.Reserved4() != 0x3F || b.Reserved8() != 0x7F || b.FECN() || b.AckReq() {
		t.Error("reserved bits")
	}
}

func TestExtHeaderAccessors(t *testing.T) {
	buf := make([]byte, 64)
	r := RETH(buf[:RETHSize])
	rf := RETHFields{VA: 0x0123456789ABCDEF, RKey: 0xDEADBEEF, DMALength: 0x80000000}
	r.Encode(&rf)
	if r.Fields() != rf {
		t.Error("RETH")
	}
	a := AtomicETH(buf[:AtomicETHSize])
	af := AtomicETHFields{VA: 0x1000, RKey: 7, SwapAdd: 0x1111222233334444, Compare: 0x5555666677778888}
	a.Encode(&af)
	if a.Fields() != af {
		t.Error("AtomicETH")
	}
	d := DETH(buf[:DETHSize])
	d[4] = 0xAA
	df := DETHFields{QKey: GSIQKey, SrcQP: 1}
	d.Encode(&df)
	if d.Fields() != df || d[4] != 0 {
		t.Error("DETH")
	}
	d.SetQKey(5)
	d.SetSrcQP(0xFFFFFF)
	if d.QKey() != 5 || d.SrcQP() != 0xFFFFFF {
		t.Error("DETH setters")
	}
	e := AETH(buf[:AETHSize])
	e.Encode(&AETHFields{Syndrome: 0x2E, MSN: 0x123456})
	if e.Syndrome() != 0x2E || e.MSN() != 0x123456 {
		t.Error("AETH")
	}
	e.SetSyndrome(0x1F)
	e.SetMSN(1)
	if e.Fields() != (AETHFields{0x1F, 1}) {
		t.Error("AETH setters")
	}
	AtomicAckETH(buf).Encode(0x0102030405060708)
	if AtomicAckETH(buf).OrigData() != 0x0102030405060708 || buf[0] != 1 {
		t.Error("AtomicAckETH")
	}
	ImmDt(buf).Encode(0xCAFEBABE)
	if ImmDt(buf).Value() != 0xCAFEBABE || buf[0] != 0xCA {
		t.Error("ImmDt")
	}
	IETH(buf).Encode(0x11223344)
	if IETH(buf).RKey() != 0x11223344 {
		t.Error("IETH")
	}
	FETH(buf).SetValue(0x31)
	if FETH(buf).Value() != 0x31 {
		t.Error("FETH")
	}
}

// allOpcodeSamples returns one valid packet description per opcode of §2.
func allOpcodeSamples() []PacketFields {
	var out []PacketFields
	for o := range 256 {
		op := Opcode(o)
		info, ok := op.Info()
		if !ok {
			continue
		}
		f := PacketFields{
			BTH:          BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: 0x000012, PSN: 0xFFFFFE, AckReq: info.Pos == PosLast || info.Pos == PosOnly},
			DETH:         DETHFields{QKey: 0x11111111, SrcQP: 0x11},
			XRCETH:       0x00abcd,
			FETH:         0x21,
			RETH:         RETHFields{VA: 0x7F0000001000, RKey: 0x1234, DMALength: 3000},
			AtomicETH:    AtomicETHFields{VA: 0x7F0000002000, RKey: 0x5678, SwapAdd: 9, Compare: 10},
			AETH:         AETHFields{Syndrome: SyndromeACKNoCredit, MSN: 77},
			AtomicAckETH: 0xAABBCCDDEEFF0011,
			ImmDt:        0x01020304,
			IETH:         0x0BADCAFE,
		}
		switch info.Payload {
		case PayloadFull:
			f.Payload = seq(1, 256)
		case PayloadLast, PayloadOnly:
			f.Payload = seq(1, 13)
		case PayloadAtomic8:
			f.Payload = seq(1, 8)
		}
		if op == CNP {
			f.BTH.BECN = true
		}
		out = append(out, f)
	}
	return out
}

// zeroAbsent clears the fields of headers the opcode does not carry, so
// that a Build→Parse round trip can be compared.
func zeroAbsent(f PacketFields) PacketFields {
	h := opcodeTable[f.BTH.Opcode].Headers
	if h&HasDETH == 0 {
		f.DETH = DETHFields{}
	}
	if h&HasXRCETH == 0 {
		f.XRCETH = 0
	}
	if h&HasFETH == 0 {
		f.FETH = 0
	}
	if h&HasRETH == 0 {
		f.RETH = RETHFields{}
	}
	if h&HasAtomicETH == 0 {
		f.AtomicETH = AtomicETHFields{}
	}
	if h&HasAETH == 0 {
		f.AETH = AETHFields{}
	}
	if h&HasAtomicAckETH == 0 {
		f.AtomicAckETH = 0
	}
	if h&HasImmDt == 0 {
		f.ImmDt = 0
	}
	if h&HasIETH == 0 {
		f.IETH = 0
	}
	if f.Payload == nil {
		f.Payload = []byte{}
	}
	f.BTH.PadCount = uint8(PadCount(len(f.Payload)))
	return f
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, f := range allOpcodeSamples() {
		for _, family := range []string{"v4", "v6"} {
			buf := make([]byte, 512)
			ib, err := Build(buf, &f)
			if err != nil {
				t.Fatalf("%v: Build: %v", f.BTH.Opcode, err)
			}
			if n, _ := PacketLen(f.BTH.Opcode, len(f.Payload)); n != len(ib) {
				t.Errorf("%v: PacketLen %d, built %d", f.BTH.Opcode, n, len(ib))
			}
			ff := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64, SrcPort: 0xC132,
				VLAN: f.BTH.Opcode%3 == 0}
			if ff.VLAN {
				ff.VLANTCI = 0x2005
			}
			if family == "v6" {
				ff.SrcIP, ff.DstIP, ff.FlowLabel, ff.TrafficClass, ff.UDPChecksum = ip6A, ip6B, 0xABCDE, 0x12, true
			}
			frame, err := Frame(make([]byte, 1024), &ff, ib)
			if err != nil {
				t.Fatalf("%v: Frame: %v", f.BTH.Opcode, err)
			}
			u, err := Unframe(frame)
			if err != nil {
				t.Fatalf("%v %s: Unframe: %v", f.BTH.Opcode, family, err)
			}
			if diff := cmp.Diff(ff, u.FrameFields, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("%v %s: frame fields:\n%s", f.BTH.Opcode, family, diff)
			}
			if err := u.VerifyICRC(); err != nil {
				t.Errorf("%v %s: %v", f.BTH.Opcode, family, err)
			}
			p, err := Parse(u.IB)
			if err != nil {
				t.Fatalf("%v: Parse: %v", f.BTH.Opcode, err)
			}
			if diff := cmp.Diff(zeroAbsent(f), p.Fields()); diff != "" {
				t.Errorf("%v: fields:\n%s", f.BTH.Opcode, diff)
			}
			if p.Headers() != opcodeTable[f.BTH.Opcode].Headers || p.HeaderLen != f.BTH.Opcode.HeaderLen() {
				t.Errorf("%v: headers %v len %d", f.BTH.Opcode, p.Headers(), p.HeaderLen)
			}
			if len(p.Pad) != PadCount(len(f.Payload)) {
				t.Errorf("%v: pad %d", f.BTH.Opcode, len(p.Pad))
			}
		}
	}
}

func TestIPv4MappedGIDs(t *testing.T) {
	ff := FrameFields{SrcIP: netip.MustParseAddr("::ffff:192.168.100.10"), DstIP: ip4B, HopLimit: 64}
	ib, _ := Build(make([]byte, 64), &PacketFields{BTH: BTHFields{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: 1}})
	frame, err := Frame(make([]byte, 128), &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	if frame[12] != 0x08 || frame[13] != 0x00 || len(frame) != MinFrameSize {
		t.Errorf("IPv4-mapped GID did not produce a padded IPv4 frame: % x", frame)
	}
	u, err := Unframe(frame)
	if err != nil {
		t.Fatal(err)
	}
	if u.SrcIP != ip4A {
		t.Errorf("SrcIP %v", u.SrcIP)
	}
	if len(u.IB) != 16 {
		t.Errorf("IB length %d, want 16 (located by UDP length despite padding)", len(u.IB))
	}
}

func TestParseErrors(t *testing.T) {
	good := func(op Opcode, payload int) []byte {
		b, err := Build(make([]byte, 8192), &PacketFields{BTH: BTHFields{Opcode: op, PKey: 0xFFFF}, Payload: make([]byte, payload)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mod := func(b []byte, fn func([]byte)) []byte { b = append([]byte(nil), b...); fn(b); return b }
	cases := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrTooShort},
		{"15 bytes", make([]byte, 15), ErrTooShort},
		{"unknown opcode", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x15 }), ErrUnknownOpcode},
		{"RD opcode", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x44 }), ErrUnknownOpcode},
		{"TVer 1", mod(good(RCSendOnly, 0), func(b []byte) { b[1] |= 1 }), ErrBadTVer},
		{"length not multiple of 4", good(RCSendOnly, 4)[:19], ErrBadLength},
		{"ACK without AETH", good(RCSendOnly, 0)[:16], nil},
		{"ACK truncated", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = byte(RCAcknowledge) }), ErrTooShort},
		{"atomic truncated", mod(good(RCSendOnly, 24), func(b []byte) { b[0] = byte(RCCompareSwap) }), ErrTooShort},
		{"pad beyond payload", mod(good(RCSendOnly, 0), func(b []byte) { b[1] |= 0x30 }), ErrBadPad},
		{"pad not zero", mod(good(RCSendOnly, 5), func(b []byte) { b[12+6] = 1 }), ErrPadNotZero},
		{"ACK with payload", mod(good(RCSendOnly, 8), func(b []byte) { b[0] = byte(RCAcknowledge) }), ErrPayloadLength},
		{"READ request with payload", mod(good(RCSendOnly, 20), func(b []byte) { b[0] = byte(RCRDMAReadRequest) }), ErrPayloadLength},
		{"FIRST not PMTU", mod(good(RCSendOnly, 1000), func(b []byte) { b[0] = byte(RCSendFirst) }), ErrPayloadLength},
		{"LAST empty", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = byte(RCSendLast) }), ErrPayloadLength},
		{"CNP with payload", mod(good(RCSendOnly, 20), func(b []byte) { b[0] = byte(CNP) }), ErrPayloadLength},
	}
	for _, c := range cases {
		_, err := Parse(c.b)
		if c.name == "ACK without AETH" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: Parse = %v, want %v", c.name, err, c.err)
		}
	}
	long := make([]byte, 12+4100+4)
	long[0], long[2], long[3] = byte(RCSendOnly), 0xFF, 0xFF
	if _, err := Parse(long); err != ErrPayloadLength {
		t.Errorf("4100-byte ONLY: %v", err)
	}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name string
		f    PacketFields
		out  int
		err  error
	}{
		{"unknown opcode", PacketFields{BTH: BTHFields{Opcode: 0x15}}, 64, ErrUnknownOpcode},
		{"TVer", PacketFields{BTH: BTHFields{Opcode: RCSendOnly, TVer: 1}}, 64, ErrBadTVer},
		{"QPN range", PacketFields{BTH: BTHFields{Opcode: RCSendOnly, DestQP: 1 << 24}}, 64, ErrFieldRange},
		{"PSN range", PacketFields{BTH: BTHFields{Opcode: RCSendOnly, PSN: 1 << 24}}, 64, ErrFieldRange},
		{"SrcQP range", PacketFields{BTH: BTHFields{Opcode: UDSendOnly}, DETH: DETHFields{SrcQP: 1 << 24}}, 64, ErrFieldRange},
		{"MSN range", PacketFields{BTH: BTHFields{Opcode: RCAcknowledge}, AETH: AETHFields{MSN: 1 << 24}}, 64, ErrFieldRange},
		{"ACK payload", PacketFields{BTH: BTHFields{Opcode: RCAcknowledge}, Payload: []byte{1}}, 64, ErrPayloadLength},
		{"short buffer", PacketFields{BTH: BTHFields{Opcode: RCSendOnly}, Payload: make([]byte, 10)}, 27, ErrShortBuffer},
	}
	for _, c := range cases {
		if _, err := Build(make([]byte, c.out), &c.f); err != c.err {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	// Exactly enough room works, and stale bytes in pad/ICRC are cleared.
	out := make([]byte, 12+10+2+4)
	for i := range out {
		out[i] = 0xEE
	}
	b, err := Build(out, &PacketFields{BTH: BTHFields{Opcode: RCSendOnly}, Payload: make([]byte, 10)})
	if err != nil || len(b) != 28 || b[22] != 0 || b[27] != 0 || b[1] != 0x20 {
		t.Errorf("Build exact: % x, %v", b, err)
	}
	if _, err := PacketLen(0x15, 0); err != ErrUnknownOpcode {
		t.Error("PacketLen unknown opcode")
	}
}

func TestBuildInPlace(t *testing.T) {
	ff := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64, IPID: 1, SrcPort: 0xC132}
	hl, err := FrameHeaderLen(&ff)
	if err != nil || hl != 42 {
		t.Fatalf("FrameHeaderLen = %d, %v", hl, err)
	}
	out := make([]byte, 200)
	payload := out[hl+BTHSize : hl+BTHSize+64]
	copy(payload, seq(0, 64))
	ib, err := Build(out[hl:], &PacketFields{
		BTH: BTHFields{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: qpB, AckReq: true, PSN: 0x123456}, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := Frame(out, &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(loadVectors(t)["V1"], frame); diff != "" {
		t.Errorf("in-place V1:\n%s", diff)
	}
	if hl6, _ := FrameHeaderLen(&FrameFields{SrcIP: ip6A, DstIP: ip6B, VLAN: true}); hl6 != 14+4+40+8 {
		t.Errorf("IPv6+VLAN header len %d", hl6)
	}
}

func TestFrameErrors(t *testing.T) {
	ib, _ := Build(make([]byte, 64), &PacketFields{BTH: BTHFields{Opcode: RCSendOnly}})
	cases := []struct {
		name string
		ff   FrameFields
		ib   []byte
		out  int
		err  error
	}{
		{"mixed families", FrameFields{SrcIP: ip4A, DstIP: ip6B}, ib, 128, ErrAddressFamily},
		{"zero addresses", FrameFields{}, ib, 128, ErrAddressFamily},
		{"short ib", FrameFields{SrcIP: ip4A, DstIP: ip4B}, ib[:15], 128, ErrTooShort},
		{"short out", FrameFields{SrcIP: ip4A, DstIP: ip4B}, ib, 59, ErrShortBuffer},
		{"too long", FrameFields{SrcIP: ip4A, DstIP: ip4B}, make([]byte, 65535-27), 70000, ErrTooLong},
	}
	for _, c := range cases {
		if _, err := Frame(make([]byte, c.out), &c.ff, c.ib); err != c.err {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	if _, err := FrameHeaderLen(&FrameFields{}); err != ErrAddressFamily {
		t.Error("FrameHeaderLen without addresses")
	}
}

func TestUnframeErrors(t *testing.T) {
	v := loadVectors(t)
	mod := func(name string, fn func([]byte)) []byte {
		b := append([]byte(nil), v[name]...)
		fn(b)
		return b
	}
	fixIPv4 := func(b []byte) {
		b[24], b[25] = 0, 0
		s := ^foldSum(sumBytes(0, b[14:34]))
		b[24], b[25] = byte(s>>8), byte(s)
	}
	cases := []struct {
		name string
		b    []byte
		err  error
	}{
		{"short", v["V1"][:13], ErrTooShort},
		{"ARP", mod("V1", func(b []byte) { b[12], b[13] = 0x08, 0x06 }), ErrNotIP},
		{"short IPv4", v["V1"][:30], ErrTooShort},
		{"short IPv6", v["V6"][:50], ErrTooShort},
		{"short VLAN", mod("V1", func(b []byte) { b[12], b[13] = 0x81, 0x00 })[:16], ErrTooShort},
		{"IPv4 version", mod("V1", func(b []byte) { b[14] = 0x55 }), ErrIPHeader},
		{"IPv4 options", mod("V1", func(b []byte) { b[14] = 0x46; fixIPv4(b) }), ErrIPOptions},
		{"IPv4 checksum", mod("V1", func(b []byte) { b[22] = 63 }), ErrIPChecksum},
		{"IPv4 MF", mod("V1", func(b []byte) { b[20] |= 0x20; fixIPv4(b) }), ErrFragmented},
		{"IPv4 offset", mod("V1", func(b []byte) { b[21] = 1; fixIPv4(b) }), ErrFragmented},
		{"IPv4 evil bit", mod("V1", func(b []byte) { b[20] |= 0x80; fixIPv4(b) }), ErrIPHeader},
		{"IPv4 TCP", mod("V1", func(b []byte) { b[23] = 6; fixIPv4(b) }), ErrNotUDP},
		{"IPv4 total length too big", mod("V1", func(b []byte) { b[17]++; fixIPv4(b) }), ErrIPHeader},
		{"IPv4 total length < 20", mod("V1", func(b []byte) { b[16], b[17] = 0, 19; fixIPv4(b) }), ErrIPHeader},
		{"IPv4 no room for UDP", mod("V1", func(b []byte) { b[16], b[17] = 0, 24; fixIPv4(b) }), ErrUDPLength},
		{"UDP port", mod("V1", func(b []byte) { b[37]++ }), ErrNotRoCE},
		{"UDP length short", mod("V1", func(b []byte) { b[39] -= 4 }), ErrUDPLength},
		{"UDP length long", mod("V1", func(b []byte) { b[39] += 4 }), ErrUDPLength},
		{"UDP too small for BTH", mod("V1", func(b []byte) { b[16], b[17], b[38], b[39] = 0, 20+8+12, 0, 20; fixIPv4(b) }), ErrTooShort},
		{"UDP checksum", mod("V6", func(b []byte) { b[61]++ }), ErrUDPChecksum},
		{"IPv6 version", mod("V6", func(b []byte) { b[14] = 0x40 }), ErrIPHeader},
		{"IPv6 next header", mod("V6", func(b []byte) { b[20] = 0 }), ErrNotUDP},
		{"IPv6 payload length", mod("V6", func(b []byte) { b[19] += 8 }), ErrIPHeader},
		{"IPv6 mapped address", mod("V6", func(b []byte) { copy(b[22:38], netip.MustParseAddr("::ffff:1.2.3.4").AsSlice()) }), ErrAddressFamily},
	}
	for _, c := range cases {
		if _, err := Unframe(c.b); err != c.err {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	// Ethernet padding and an FCS after the datagram are ignored.
	b := append(append([]byte(nil), v["V3"]...), 1, 2, 3, 4)
	u, err := Unframe(b)
	if err != nil || len(u.IB) != 16+4 {
		t.Errorf("trailer: %v, IB %d bytes", err, len(u.IB))
	}
	// UDP checksum 0 is accepted on IPv6 too (spec §1.5).
	z := mod("V6", func(b []byte) { b[60], b[61] = 0, 0 })
	if u, err := Unframe(z); err != nil || u.UDPChecksum {
		t.Errorf("IPv6 zero UDP checksum: %v", err)
	}
	// A correct IPv4 UDP checksum is accepted and reproduced.
	ff := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64, UDPChecksum: true}
	ib, _ := Build(make([]byte, 64), &PacketFields{BTH: BTHFields{Opcode: RCSendOnly}, Payload: []byte("abc")})
	frame, _ := Frame(make([]byte, 128), &ff, ib)
	if u, err := Unframe(frame); err != nil || !u.UDPChecksum {
		t.Errorf("IPv4 UDP checksum: %v", err)
	}
}

func TestUDPChecksumV6(t *testing.T) {
	f := loadVectors(t)["V6"]
	if f[60] != 0x92 || f[61] != 0x76 {
		t.Fatalf("vector")
	}
	u, _ := Unframe(f)
	udp := append([]byte(nil), u.UDP...)
	udp[6], udp[7] = 0, 0
	if c := udpChecksum(u.IP, udp, u.IB); c != 0x9276 {
		t.Errorf("udpChecksum = %#x, want 0x9276", c)
	}
}

func TestICRCErrors(t *testing.T) {
	v := loadVectors(t)
	u, _ := Unframe(v["V1"])
	if _, err := ICRC(u.IP[:19], u.UDP, u.IB); err != ErrBadIPHeader {
		t.Error(err)
	}
	ip := append([]byte(nil), u.IP...)
	ip[0] = 0x46
	if _, err := ICRC(ip, u.UDP, u.IB); err != ErrBadIPHeader {
		t.Error(err)
	}
	if _, err := ICRC(u.IP, u.UDP[:7], u.IB); err != ErrTooShort {
		t.Error(err)
	}
	if _, err := ICRC(u.IP, u.UDP, u.IB[:15]); err != ErrTooShort {
		t.Error(err)
	}
	if err := PutICRC(nil, u.UDP, u.IB); err != ErrBadIPHeader {
		t.Error(err)
	}
	if err := VerifyICRC(nil, u.UDP, u.IB); err != ErrBadIPHeader {
		t.Error(err)
	}
	// KeepICRC keeps a deliberately wrong ICRC (fault injection).
	ib := append([]byte(nil), u.IB...)
	ib[len(ib)-1] ^= 0xFF
	ff := u.FrameFields
	ff.KeepICRC = true
	frame, err := Frame(make([]byte, 256), &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	u2, _ := Unframe(frame)
	if u2.VerifyICRC() != ErrBadICRC {
		t.Error("KeepICRC did not keep the corrupt ICRC")
	}
}

// TestUpdateCRC32: UpdateCRC32 is hash/crc32's IEEE CRC, in one piece or
// continued.
func TestUpdateCRC32(t *testing.T) {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i * 7)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 500, 1000} {
		want := crc32.ChecksumIEEE(b[:n])
		if got := UpdateCRC32(0, b[:n]); got != want {
			t.Errorf("%d bytes: %#x, want %#x", n, got, want)
		}
		if got := UpdateCRC32(UpdateCRC32(0, b[:n/3]), b[n/3:n]); got != want {
			t.Errorf("%d bytes in two: %#x, want %#x", n, got, want)
		}
	}
}
