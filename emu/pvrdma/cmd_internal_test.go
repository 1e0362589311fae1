package pvrdma

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// TestCmdTableComplete: every opcode of the ABI has a handler, installed
// under the opcode its request type names.
func TestCmdTableComplete(t *testing.T) {
	for op := abi.Opcode(0); op < abi.NumOpcodes; op++ {
		if cmdTable[op] == nil {
			t.Errorf("no handler for %v", op)
		}
	}
}
