package subnet

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib/mad"
)

// TestSelectors: selectors compare what MTUs and rates are, not their
// enumeration (rate 5 is 5 Gb/s, below rate 3's 10 Gb/s), and a new
// group's value is the best the selector allows up to the subnet's.
func TestSelectors(t *testing.T) {
	for _, c := range []struct {
		sel, want, v uint8
		ord          func(uint8) int
		ok           bool
	}{
		{mad.SelGreater, mad.Rate5Gbps, mad.Rate10Gbps, rateOrd, true},
		{mad.SelLess, mad.Rate5Gbps, mad.Rate10Gbps, rateOrd, false},
		{mad.SelLess, mad.Rate10Gbps, mad.Rate5Gbps, rateOrd, true},
		{mad.SelGreater, mad.Rate60Gbps, mad.Rate40Gbps, rateOrd, false},
		{mad.SelExactly, mad.Rate40Gbps, mad.Rate40Gbps, rateOrd, true},
		{mad.SelExactly, 0, 0, rateOrd, false},
		{mad.SelLargest, 63, mad.Rate40Gbps, rateOrd, true},
		{mad.SelGreater, mad.MTU2048, mad.MTU4096, mtuOrd, true},
		{mad.SelLess, mad.MTU2048, mad.MTU4096, mtuOrd, false},
	} {
		if got := selected(c.sel, c.want, c.v, c.ord); got != c.ok {
			t.Errorf("selected(%d, %d, %d) = %v", c.sel, c.want, c.v, got)
		}
	}
	for _, c := range []struct {
		given          bool
		sel, want, out uint8
		ord            func(uint8) int
		have           uint8
	}{
		{false, 0, 0, mad.Rate40Gbps, rateOrd, mad.Rate40Gbps},
		{true, mad.SelLess, mad.Rate10Gbps, mad.Rate5Gbps, rateOrd, mad.Rate40Gbps},
		{true, mad.SelLess, mad.Rate2_5Gbps, 0, rateOrd, mad.Rate40Gbps},
		{true, mad.SelExactly, mad.Rate10Gbps, mad.Rate10Gbps, rateOrd, mad.Rate40Gbps},
		{true, mad.SelExactly, mad.Rate120Gbps, 0, rateOrd, mad.Rate40Gbps},
		{true, mad.SelGreater, mad.Rate30Gbps, mad.Rate40Gbps, rateOrd, mad.Rate40Gbps},
		{true, mad.SelLess, mad.MTU4096, mad.MTU2048, mtuOrd, mad.MTU4096},
		{true, mad.SelGreater, mad.MTU4096, 0, mtuOrd, mad.MTU4096},
		{true, mad.SelLargest, 0, mad.MTU2048, mtuOrd, mad.MTU2048},
	} {
		if got := pick(c.given, c.sel, c.want, c.have, c.ord); got != c.out {
			t.Errorf("pick(%v, %d, %d, %d) = %d, want %d", c.given, c.sel, c.want, c.have, got, c.out)
		}
	}
}
