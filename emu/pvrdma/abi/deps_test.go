package abi

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports: the ABI is plain data below the device; it imports only the
// standard library (in particular not the device, so fuzzers and fakes
// can use it without it).
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("emu/pvrdma/abi imports %s: only the standard library is allowed", imp)
		}
	}
}
