package mlx5

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyndromesDistinct: every syndrome the device answers names one
// cause (a driver developer reads the syndrome in dmesg and looks it up):
// no two Synd* constants share a value. The constants are read from the
// package's source, so a new one is checked without listing it here.
func TestSyndromesDistinct(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]string{}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(node ast.Node) bool {
			vs, isSpec := node.(*ast.ValueSpec)
			if !isSpec || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Synd") {
				return true
			}
			name := vs.Names[0].Name
			bin, isBin := vs.Values[0].(*ast.BinaryExpr)
			if !isBin {
				return true
			}
			lit, isLit := bin.Y.(*ast.BasicLit)
			if !isLit {
				t.Errorf("%s: not syndBase | a literal", name)
				return true
			}
			n++
			if other, dup := seen[lit.Value]; dup {
				t.Errorf("%s and %s are both syndBase | %s", other, name, lit.Value)
			}
			seen[lit.Value] = name
			return true
		})
	}
	if n < 40 {
		t.Errorf("found %d syndromes: the parse missed them", n)
	}
}
