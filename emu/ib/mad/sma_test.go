package mad

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func testPort() PortState {
	st := NewPortState(0x0002c90300001000, 0x0002c90300001001, "hcaemu mlx5_0")
	st.VendorID, st.DeviceID, st.Revision = 0x0002c9, 0x1013, 0
	st.LID, st.MasterSMLID = 2, 1
	return st
}

// smp builds a 256-byte SMP request.
func smp(class, method uint8, attr uint16, mod uint32) []byte {
	s := SMP{Header: Header{BaseVersion: 1, MgmtClass: class, ClassVersion: 1, Method: method,
		TID: 0x1122334455667788, AttrID: attr, AttrMod: mod}}
	if class == ClassSubnDR {
		s.DRSLID, s.DRDLID = 0xFFFF, 0xFFFF
	}
	b := make([]byte, Size)
	_ = s.Encode(b)
	return b
}

func answer(t *testing.T, st *PortState, req []byte) SMP {
	t.Helper()
	resp := make([]byte, Size)
	if err := st.AnswerSMP(req, resp); err != nil {
		t.Fatalf("AnswerSMP: %v", err)
	}
	s, err := DecodeSMP(resp)
	if err != nil {
		t.Fatal(err)
	}
	if s.Method != MethodGetResp || s.TID != 0x1122334455667788 {
		t.Fatalf("response method %#x TID %#x", s.Method, s.TID)
	}
	return s
}

// TestSMAReads: the MADs mlx5 sends through MAD_IFC at probe and their
// answers at the offsets the driver reads (shared/spec/mlx5.md §5.4.1).
func TestSMAReads(t *testing.T) {
	st := testPort()
	be := binary.BigEndian

	ni := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrNodeInfo, 0))
	d := ni.Data[:]
	if ni.Status != 0 || d[0] != 1 || d[1] != 1 || d[2] != NodeTypeCA || d[3] != 1 ||
		be.Uint64(d[4:]) != st.SystemImageGUID || be.Uint64(d[12:]) != st.NodeGUID || be.Uint64(d[20:]) != st.PortGUID ||
		be.Uint16(d[28:]) != 128 || be.Uint16(d[30:]) != 0x1013 || be.Uint32(d[36:])&0xffff != 0x02c9 || d[36] != 1 {
		t.Errorf("NodeInfo: status %#x data %x", ni.Status, d[:40])
	}

	nd := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrNodeDescription, 0))
	if nd.Status != 0 || !bytes.HasPrefix(nd.Data[:], []byte("hcaemu mlx5_0\x00")) {
		t.Errorf("NodeDescription: %#x %q", nd.Status, nd.Data[:])
	}

	pi := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrPortInfo, 1))
	d = pi.Data[:]
	if pi.Status != 0 || be.Uint64(d[8:]) != 0xfe80000000000000 || be.Uint16(d[16:]) != 2 || be.Uint16(d[18:]) != 1 ||
		be.Uint32(d[20:]) != CapIsSystemImageGUIDSupported || d[31]&15 != 2 || d[32]&15 != 4 || d[32]>>4 != 7 ||
		d[33]>>4 != 5 || d[34]&7 != 0 || d[35]>>4 != 4 || d[36]>>4 != 5 || d[36]&15 != 0 || d[37]>>4 != 1 ||
		d[41]&15 != 5 || be.Uint16(d[46:]) != 0 || be.Uint16(d[48:]) != 0 || d[50] != 1 || d[51]&31 != 18 {
		t.Errorf("PortInfo: status %#x data %x", pi.Status, d)
	}

	gi := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrGUIDInfo, 0))
	if gi.Status != 0 || be.Uint64(gi.Data[0:]) != st.PortGUID || be.Uint64(gi.Data[8:]) != 0 {
		t.Errorf("GUIDInfo: %#x %x", gi.Status, gi.Data[:16])
	}
	pk := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrPKeyTable, 0))
	if pk.Status != 0 || be.Uint16(pk.Data[0:]) != 0xffff || be.Uint16(pk.Data[2:]) != 0 {
		t.Errorf("P_KeyTable: %#x %x", pk.Status, pk.Data[:4])
	}
	if s := answer(t, &st, smp(ClassSubnLID, MethodGet, AttrPKeyTable, 3)); s.Status != 0 {
		t.Errorf("P_KeyTable block 3 of 4: %#x", s.Status)
	}
}

// TestSMAStatuses: every refusal that is still an answer.
func TestSMAStatuses(t *testing.T) {
	for _, c := range []struct {
		name string
		req  func() []byte
		want uint16
	}{
		{"ExtendedPortInfo", func() []byte { return smp(ClassSubnLID, MethodGet, AttrMlxExtendedPortInfo, 1) }, StatusAttrUnsupported},
		{"SMInfo", func() []byte { return smp(ClassSubnLID, MethodGet, AttrSMInfo, 0) }, StatusAttrUnsupported},
		{"PortInfo of port 2", func() []byte { return smp(ClassSubnLID, MethodGet, AttrPortInfo, 2) }, StatusInvalidField},
		{"GUIDInfo block 1", func() []byte { return smp(ClassSubnLID, MethodGet, AttrGUIDInfo, 1) }, StatusInvalidField},
		{"P_KeyTable block 4", func() []byte { return smp(ClassSubnLID, MethodGet, AttrPKeyTable, 4) }, StatusInvalidField},
		{"P_KeyTable of a switch port", func() []byte { return smp(ClassSubnLID, MethodGet, AttrPKeyTable, 1<<16) }, StatusInvalidField},
		{"Set NodeInfo", func() []byte { return smp(ClassSubnLID, MethodSet, AttrNodeInfo, 0) }, StatusAttrUnsupported},
		{"Send", func() []byte { return smp(ClassSubnLID, MethodSend, AttrNodeInfo, 0) }, StatusMethodUnsupported},
		{"class version 2", func() []byte { b := smp(ClassSubnLID, MethodGet, AttrNodeInfo, 0); b[2] = 2; return b }, StatusBadVersion},
		{"base version 2", func() []byte { b := smp(ClassSubnLID, MethodGet, AttrNodeInfo, 0); b[0] = 2; return b }, StatusBadVersion},
		{"directed NodeInfo", func() []byte { return smp(ClassSubnDR, MethodGet, AttrNodeInfo, 0) }, SMPDirection},
		{"directed ExtendedPortInfo", func() []byte { return smp(ClassSubnDR, MethodGet, AttrMlxExtendedPortInfo, 1) }, SMPDirection | StatusAttrUnsupported},
	} {
		st := testPort()
		req := c.req()
		s := answer(t, &st, req)
		if s.Status != c.want {
			t.Errorf("%s: status %#x, want %#x", c.name, s.Status, c.want)
		}
		if s.Status&^SMPDirection != 0 && !bytes.Equal(s.Data[:], req[64:128]) {
			t.Errorf("%s: a refusal changed data[]", c.name)
		}
		if s.AttrID != binary.BigEndian.Uint16(req[16:]) || s.AttrMod != binary.BigEndian.Uint32(req[20:]) {
			t.Errorf("%s: header not copied", c.name)
		}
	}
}

// TestSMARefusals: what gets no answer leaves resp alone.
func TestSMARefusals(t *testing.T) {
	st := testPort()
	for _, c := range []struct {
		name string
		req  []byte
		want error
	}{
		{"GetResp", smp(ClassSubnLID, MethodGetResp, AttrNodeInfo, 0), ErrNoResponse},
		{"Trap", smp(ClassSubnLID, MethodTrap, AttrNotice, 0), ErrNoResponse},
		{"TrapRepress", smp(ClassSubnLID, MethodTrapRepress, AttrNotice, 0), ErrNoResponse},
		{"CM class", func() []byte { b := smp(ClassSubnLID, MethodGet, 0x10, 0); b[1] = ClassCM; return b }(), ErrClass},
		{"short", make([]byte, 255), ErrSize},
	} {
		resp := bytes.Repeat([]byte{0xA5}, Size)
		if err := st.AnswerSMP(c.req, resp); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if !bytes.Equal(resp, bytes.Repeat([]byte{0xA5}, Size)) {
			t.Errorf("%s: resp written", c.name)
		}
	}
	if err := st.AnswerSMP(smp(ClassSubnLID, MethodGet, AttrNodeInfo, 0), make([]byte, 100)); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short resp: %v", err)
	}
}

// TestSMASetPortInfo: a Set PortInfo changes the settable capability bits
// and nothing else (not the LID the subnet gave), and answers GetResp with
// the new PortInfo; the request buffer may be the response's.
func TestSMASetPortInfo(t *testing.T) {
	st := testPort()
	req := smp(ClassSubnLID, MethodSet, AttrPortInfo, 1)
	p := PortInfo{LID: 0x77, MasterSMLID: 9, CapabilityMask: CapIsCommManagementSupported | CapIsSM}
	_ = p.Encode(req[64:])
	if err := st.AnswerSMP(req, req); err != nil {
		t.Fatal(err)
	}
	s, _ := DecodeSMP(req)
	got, _ := DecodePortInfo(s.Data[:])
	want := uint32(CapIsSystemImageGUIDSupported | CapIsCommManagementSupported)
	if s.Method != MethodGetResp || s.Status != 0 || got.CapabilityMask != want || got.LID != 2 || got.MasterSMLID != 1 {
		t.Errorf("Set PortInfo: method %#x status %#x %+v", s.Method, s.Status, got)
	}
	if st.CapabilityMask != want || st.LID != 2 {
		t.Errorf("state after Set: %#x LID %d", st.CapabilityMask, st.LID)
	}
	st.SetCapabilityMask(0)
	if st.CapabilityMask != CapIsSystemImageGUIDSupported {
		t.Errorf("SetCapabilityMask(0): %#x", st.CapabilityMask)
	}
}

// FuzzSMA: whatever the request, AnswerSMP either refuses it with one of
// its defined errors and leaves resp alone, or writes a well-formed
// response: GetResp, the request's header otherwise, a defined status (D
// set exactly for directed route), the attribute the state says on
// success and the request's data on a refusal; and the port's LID, GUIDs
// and P_Keys never change, its capability mask only in the settable bits.
func FuzzSMA(f *testing.F) {
	for _, a := range []uint16{AttrNodeInfo, AttrNodeDescription, AttrPortInfo, AttrGUIDInfo, AttrPKeyTable, AttrMlxExtendedPortInfo} {
		for _, cl := range []uint8{ClassSubnLID, ClassSubnDR} {
			f.Add(smp(cl, MethodGet, a, 1))
			f.Add(smp(cl, MethodSet, a, 0))
		}
	}
	for _, m := range []uint8{MethodGet, MethodSet, MethodGetResp} {
		perf := make([]byte, Size)
		h := Header{BaseVersion: 1, MgmtClass: ClassPerf, ClassVersion: 1, Method: m, AttrID: AttrClassPortInfo}
		_ = h.Encode(perf)
		f.Add(perf)
	}
	f.Fuzz(func(t *testing.T, req []byte) {
		st := testPort()
		before := testPort()
		resp := bytes.Repeat([]byte{0xA5}, Size)
		err := st.AnswerSMP(req, resp)
		if st.LID != before.LID || st.MasterSMLID != before.MasterSMLID || st.PortGUID != before.PortGUID ||
			st.PKeys[0] != 0xffff || (st.CapabilityMask^before.CapabilityMask)&^SettableCapabilityMask != 0 {
			t.Fatalf("state changed: %+v", st)
		}
		if err != nil {
			if !errors.Is(err, ErrSize) && !errors.Is(err, ErrClass) && !errors.Is(err, ErrNoResponse) {
				t.Fatalf("undefined refusal %v", err)
			}
			if !bytes.Equal(resp, bytes.Repeat([]byte{0xA5}, Size)) {
				t.Fatal("a refusal wrote resp")
			}
			if errors.Is(err, ErrClass) {
				checkPerf(t, req)
			}
			return
		}
		q, _ := DecodeSMP(req)
		s, derr := DecodeSMP(resp)
		if derr != nil || s.Method != MethodGetResp {
			t.Fatalf("response %v method %#x", derr, s.Method)
		}
		h, qh := s.Header, q.Header
		h.Method, h.Status, qh.Method, qh.Status = 0, 0, 0, 0
		if h != qh || s.MKey != q.MKey || s.DRSLID != q.DRSLID || s.InitialPath != q.InitialPath || s.ReturnPath != q.ReturnPath {
			t.Fatal("header or paths not copied")
		}
		if (s.Status&SMPDirection != 0) != q.Directed() {
			t.Fatalf("D bit %#x for class %#x", s.Status, q.MgmtClass)
		}
		switch status := s.Status &^ SMPDirection; status {
		case StatusOK:
			var want [SMPDataSize]byte
			switch q.AttrID {
			case AttrNodeInfo:
				ni := st.NodeInfo()
				_ = ni.Encode(want[:])
			case AttrPortInfo:
				pi := st.PortInfo()
				_ = pi.Encode(want[:])
			case AttrNodeDescription:
				want = st.NodeDescription
			case AttrGUIDInfo:
				binary.BigEndian.PutUint64(want[:], st.PortGUID)
			case AttrPKeyTable:
				if q.AttrMod == 0 {
					binary.BigEndian.PutUint16(want[:], 0xffff)
				}
			default:
				t.Fatalf("attribute %#x answered", q.AttrID)
			}
			if s.Data != want {
				t.Fatalf("attribute %#x: data %x, want %x", q.AttrID, s.Data, want)
			}
		case StatusBadVersion, StatusMethodUnsupported, StatusAttrUnsupported, StatusInvalidField:
			if s.Data != q.Data {
				t.Fatal("a refusal changed data[]")
			}
		default:
			t.Fatalf("undefined status %#x", status)
		}
	})
}

// checkPerf is FuzzSMA's oracle for what the SMA refused as not an SMP:
// the PMA answers a Performance Management request (a GetResp with the
// request's TID and attribute; ClassPortInfo's data only with status OK,
// zeroes otherwise) and leaves resp alone for anything else.
func checkPerf(t *testing.T, req []byte) {
	resp := bytes.Repeat([]byte{0xA5}, Size)
	err := AnswerPerf(req, resp)
	q, qerr := DecodeHeader(req)
	take := len(req) >= Size && qerr == nil && q.MgmtClass == ClassPerf && !q.IsResponse() && q.Method != MethodTrap && q.Method != MethodTrapRepress
	if (err == nil) != take {
		t.Fatalf("AnswerPerf: %v for %+v (%d bytes)", err, q, len(req))
	}
	if err != nil {
		if !bytes.Equal(resp, bytes.Repeat([]byte{0xA5}, Size)) {
			t.Fatal("a PMA refusal wrote resp")
		}
		return
	}
	h, _ := DecodeHeader(resp)
	if h.Method != MethodGetResp || h.TID != q.TID || h.AttrID != q.AttrID || h.MgmtClass != ClassPerf {
		t.Fatalf("PMA answer %+v to %+v", h, q)
	}
	data := resp[PerfDataOffset : PerfDataOffset+ClassPortInfoSize]
	if h.Status == StatusOK {
		if cpi, _ := DecodeClassPortInfo(data); cpi != (ClassPortInfo{BaseVersion: 1, ClassVersion: 1, RespTimeValue: 18}) {
			t.Fatalf("ClassPortInfo %+v", cpi)
		}
	} else if !bytes.Equal(data, make([]byte, ClassPortInfoSize)) {
		t.Fatal("an error answer carries data")
	}
}
