package roce

import "testing"

// Len reads a table; every combination of header bits, valid or not, has
// the length the headers add up to, and the table's entries are those of
// the spec's header sizes.
func TestExtHeadersLen(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got, want := ExtHeaders(h).Len(), ExtHeaders(h).sum(); got != want {
			t.Fatalf("ExtHeaders(%#x).Len() = %d, want %d", h, got, want)
		}
	}
	for _, tc := range []struct {
		h    ExtHeaders
		want int
	}{
		{0, 0}, {HasRETH, 16}, {HasRETH | HasImmDt, 20}, {HasAETH | HasAtomicAckETH, 12},
		{HasFETH | HasRETH, 20}, {HasDETH | HasImmDt, 12}, {HasAtomicETH, 28}, {HasCNPPad, 16},
	} {
		if got := tc.h.Len(); got != tc.want {
			t.Errorf("%v: Len() = %d, want %d", tc.h, got, tc.want)
		}
	}
}
