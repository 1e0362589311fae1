package pvrdma_test

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/verbstest"
)

// FuzzRCPeer is verbstest.FuzzRCPeer (a hostile peer at a connected RC
// pair, under the WriteWatch oracle) against the PVRDMA model; its seed
// corpus is testdata/fuzz/FuzzRCPeer.
func FuzzRCPeer(f *testing.F) {
	verbstest.FuzzRCPeer(f, newVerbsHost)
}
