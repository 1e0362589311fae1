package pvrdma

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports: the ABI is plain data below the device; it imports only the
// standard library (in particular not package emu, so fuzzers, fakes and a
// second device model can use it without the device).
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("emu/pvrdma imports %s: only the standard library is allowed", imp)
		}
	}
}
