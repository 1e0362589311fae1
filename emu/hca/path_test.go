package hca

import (
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/transport"
)

// A cached path is good for its generation and key only; a miss is
// remembered too; the empty cache hits nothing, generation 0 included.
func TestPathCache(t *testing.T) {
	type key struct{ dgid, qpn uint32 }
	var c PathCache[key]
	if _, _, hit := c.Get(0, key{}); hit {
		t.Fatal("the empty cache hit generation 0")
	}
	p := transport.Path{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152}
	c.Put(7, key{1, 2}, p, true)
	if got, ok, hit := c.Get(7, key{1, 2}); !hit || !ok || got != p {
		t.Errorf("Get(7, same key) = %v %v %v", got, ok, hit)
	}
	for _, tc := range []struct {
		gen uint64
		k   key
	}{{8, key{1, 2}}, {6, key{1, 2}}, {7, key{1, 3}}, {7, key{2, 2}}} {
		if _, _, hit := c.Get(tc.gen, tc.k); hit {
			t.Errorf("Get(%d, %v) hit a path stored for (7, {1 2})", tc.gen, tc.k)
		}
	}
	c.Put(8, key{1, 2}, transport.Path{}, false)
	if _, ok, hit := c.Get(8, key{1, 2}); !hit || ok {
		t.Errorf("a remembered miss: ok %v hit %v", ok, hit)
	}
}
