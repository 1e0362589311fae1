package mlx5

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/verbstest"
)

// FuzzRCPeer is verbstest.FuzzRCPeer (a hostile peer at a connected RC
// pair, under the WriteWatch oracle) against the mlx5 model: the attacker
// injects IB packets on the pair's subnet. Its seeds are verbstest's and
// testdata/fuzz/FuzzRCPeer.
func FuzzRCPeer(f *testing.F) {
	verbstest.FuzzRCPeer(f, newVerbsHost)
}
