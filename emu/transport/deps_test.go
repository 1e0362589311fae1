package transport

import (
	"go/build"
	"strings"
	"testing"
)

// TestDeps: the transport services and the memory regions belong to no
// device model. Each package may import only the project packages listed
// here (and the standard library): RC and UD their shared ground (this
// package), never a device model (emu/pvrdma), its command ABI
// (emu/pvrdma/abi) or its ring formats (uverbs/pvrdma).
func TestDeps(t *testing.T) {
	const module = "github.com/hcaemu/hcaemu/"
	allowed := map[string][]string{
		".":     {"dma", "emu/mr", "emu/roce"},
		"rc":    {"dma", "emu/mr", "emu/roce", "emu/transport"},
		"ud":    {"dma", "emu/mr", "emu/roce", "emu/transport"},
		"uc":    {"dma", "emu/mr", "emu/roce", "emu/transport"},
		"../mr": {"dma"},
	}
	for dir, imports := range allowed {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			rel, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			found := false
			for _, a := range imports {
				found = found || rel == a
			}
			if !found {
				t.Errorf("%s (%s) imports %s; allowed: %v", dir, pkg.Name, rel, imports)
			}
		}
	}
}
