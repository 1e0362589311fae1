package mad

import (
	"errors"
	"testing"
)

// TestAnswerPerf: the PMA answers ClassPortInfo Get with no optional
// counters, refuses other methods and attributes and bad versions with
// their MAD status, and leaves responses, traps and other classes alone.
func TestAnswerPerf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      Header
		status uint16
		err    error
	}{
		{"ClassPortInfo", Header{MgmtClass: ClassPerf, ClassVersion: 1, Method: MethodGet, AttrID: AttrClassPortInfo}, StatusOK, nil},
		{"PortCounters", Header{MgmtClass: ClassPerf, ClassVersion: 1, Method: MethodGet, AttrID: 0x12}, StatusAttrUnsupported, nil},
		{"Set", Header{MgmtClass: ClassPerf, ClassVersion: 1, Method: MethodSet, AttrID: AttrClassPortInfo}, StatusMethodUnsupported, nil},
		{"class version 2", Header{MgmtClass: ClassPerf, ClassVersion: 2, Method: MethodGet, AttrID: AttrClassPortInfo}, StatusBadVersion, nil},
		{"a response", Header{MgmtClass: ClassPerf, ClassVersion: 1, Method: MethodGetResp, AttrID: AttrClassPortInfo}, 0, ErrNotPerf},
		{"a trap", Header{MgmtClass: ClassPerf, ClassVersion: 1, Method: MethodTrap}, 0, ErrNotPerf},
		{"an SA MAD", Header{MgmtClass: ClassSubnAdm, ClassVersion: 2, Method: MethodGet, AttrID: AttrClassPortInfo}, 0, ErrNotPerf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, resp := make([]byte, Size), make([]byte, Size)
			tc.h.BaseVersion, tc.h.TID = BaseVersion, 0x1234
			if err := tc.h.Encode(req); err != nil {
				t.Fatal(err)
			}
			for i := range resp {
				resp[i] = 0xee
			}
			err := AnswerPerf(req, resp)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			h, _ := DecodeHeader(resp)
			if h.Method != MethodGetResp || h.Status != tc.status || h.TID != 0x1234 || h.AttrID != tc.h.AttrID {
				t.Fatalf("answer header %+v, want GetResp status %#x", h, tc.status)
			}
			cpi, _ := DecodeClassPortInfo(resp[PerfDataOffset:])
			want := ClassPortInfo{}
			if tc.status == StatusOK {
				want = ClassPortInfo{BaseVersion: 1, ClassVersion: 1, RespTimeValue: 18}
			}
			if cpi != want {
				t.Errorf("ClassPortInfo %+v, want %+v", cpi, want)
			}
		})
	}
	if err := AnswerPerf(make([]byte, 10), make([]byte, Size)); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short MAD: %v", err)
	}
}
