package emu

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
)

// TestCmdTableComplete: every opcode of the ABI has a handler, installed
// under the opcode its request type names.
func TestCmdTableComplete(t *testing.T) {
	for op := pvrdma.Opcode(0); op < pvrdma.NumOpcodes; op++ {
		if cmdTable[op] == nil {
			t.Errorf("no handler for %v", op)
		}
	}
}
