package mlx5

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// docs/mlx5.md's tables of what the device answers are generated from the
// code: the command table, the syndromes, the capabilities, the registers,
// the send opcodes and CQE syndromes, the PRM fields the device reads and
// writes. TestDocMLX5 fails when the document differs from what the code
// generates; -update-doc rewrites the generated sections:
//
//	go test ./emu/mlx5 -run TestDocMLX5 -update-doc

var updateDoc = flag.Bool("update-doc", false, "rewrite the generated sections of docs/mlx5.md")

const docPath = "../../docs/mlx5.md"

func TestDocMLX5(t *testing.T) {
	old, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(old)
	consts := constValues(t, ".", "ifc", "../../uverbs/mlx5")
	for _, s := range []struct {
		name string
		gen  func() string
	}{
		{"commands", docCommands},
		{"bad-op", docBadOp},
		{"syndromes", func() string { return docSyndromes(t) }},
		{"caps", docCaps},
		{"registers", docRegisters},
		{"send-opcodes", func() string { return docSendOpcodes(t, consts) }},
		{"cqe-syndromes", func() string { return docCQESyndromes(t, consts) }},
		{"fields", func() string { return docFields(t) }},
	} {
		begin := "<!-- generated:" + s.name + " -->\n"
		end := "<!-- end generated:" + s.name + " -->"
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			t.Errorf("docs/mlx5.md has no section %q%q", begin, end)
			continue
		}
		doc = doc[:i+len(begin)] + s.gen() + doc[j:]
	}
	if doc == string(old) {
		return
	}
	if *updateDoc {
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/mlx5.md is stale: the code answers other commands, caps, registers or fields than it says; regenerate it:\n\tgo test ./emu/mlx5 -run TestDocMLX5 -update-doc")
}

var docStates = map[funcState]string{stateDisabled: "any", stateEnabled: "enabled", stateInitialized: "initialized (after INIT_HCA)"}

func docCommands() string {
	return mdTable("| opcode | MLX5_CMD_OP_ | least inlen | least outlen | function state |\n|---|---|---:|---:|---|\n",
		commands, func(op ifc.Opcode, c cmdSpec) string {
			return fmt.Sprintf("| 0x%03x | %s | 0x%x | 0x%x | %s |\n", uint16(op), command(op).Name, c.inLen, c.outLen, docStates[c.state])
		})
}

// mdTable is a Markdown table: head, then a row per entry of m in the
// order of its keys.
func mdTable[K cmp.Ordered, V any](head string, m map[K]V, row func(K, V) string) string {
	var b strings.Builder
	b.WriteString(head)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(row(k, m[k]))
	}
	return b.String()
}

func docBadOp() string {
	var names []string
	for _, op := range ifc.Opcodes() {
		if !Implemented(op) {
			names = append(names, fmt.Sprintf("0x%03x %s", uint16(op), command(op).Name))
		}
	}
	return "`" + strings.Join(names, "`, `") + "`\n"
}

// docSyndromes lists the Synd* constants of the package with their
// comments (the values are syndBase | a literal).
func docSyndromes(t *testing.T) string {
	type synd struct {
		name, doc string
		v         uint64
	}
	var all []synd
	eachConst(t, ".", func(vs *ast.ValueSpec) {
		if len(vs.Names) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Synd") || len(vs.Values) != 1 {
			return
		}
		be, ok := vs.Values[0].(*ast.BinaryExpr)
		if !ok {
			return
		}
		lit, ok := be.Y.(*ast.BasicLit)
		if !ok {
			return
		}
		v, err := strconv.ParseUint(lit.Value, 0, 32)
		if err != nil {
			t.Fatal(err)
		}
		name := vs.Names[0].Name
		all = append(all, synd{name, strings.TrimPrefix(commentText(vs.Comment, vs.Doc), name+" is "), syndBase | v})
	})
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	for i := 1; i < len(all); i++ {
		if all[i].v == all[i-1].v {
			t.Errorf("syndromes %s and %s are both %#x: a dmesg line would not name its cause", all[i-1].name, all[i].name, all[i].v)
		}
	}
	var b strings.Builder
	b.WriteString("| syndrome | name | cause |\n|---|---|---|\n")
	for _, s := range all {
		fmt.Fprintf(&b, "| 0x%08x | %s | %s |\n", s.v, s.name, s.doc)
	}
	return b.String()
}

func commentText(groups ...*ast.CommentGroup) string {
	for _, g := range groups {
		if g != nil {
			s := strings.Join(strings.Fields(g.Text()), " ")
			if first, rest, ok := strings.Cut(s, ": "); ok && !strings.Contains(first, " ") {
				s = rest // a "SyndX: ..." doc comment
			}
			return strings.ReplaceAll(s, "|", "\\|")
		}
	}
	return ""
}

func docCaps() string {
	var b strings.Builder
	writable := map[string]bool{}
	for _, w := range writableGeneral {
		writable[w.name] = true
	}
	row := func(block string, c capValue) {
		w := ""
		if writable[c.name] {
			w = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | 0x%x | %d | %d (0x%x) | %s |\n", block, c.name, c.f.Off, c.f.Width, c.v, c.v, w)
	}
	b.WriteString("| block | field | bit offset | bits | MAX (and CUR until set) | SET_HCA_CAP writes it (≤ MAX) |\n|---|---|---:|---:|---:|---|\n")
	listed := map[string]bool{}
	for _, c := range generalCaps {
		row("cmd_hca_cap", c)
		listed[c.name] = true
	}
	for _, w := range writableGeneral {
		if !listed[w.name] {
			row("cmd_hca_cap", capValue{w.name, w.f, 0})
		}
	}
	for _, c := range atomicCaps {
		row("atomic_caps", c)
	}
	return b.String()
}

func docRegisters() string {
	return mdTable("| register_id | register | bytes | access |\n|---|---|---:|---|\n",
		registers, func(id uint32, r registerSpec) string {
			acc := "read"
			if r.write != nil {
				acc = "read, write"
			}
			return fmt.Sprintf("| 0x%04x | %s | %d | %s |\n", id, r.name, r.size, acc)
		})
}

// mapPairs returns the key and value expressions (as written) of the
// composite literal var name in file.
func mapPairs(t *testing.T, file, name string) [][2]string {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Names[0].Name != name {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			kv := e.(*ast.KeyValueExpr)
			out = append(out, [2]string{exprString(kv.Key), exprString(kv.Value)})
		}
		return false
	})
	if out == nil {
		t.Fatalf("%s: no %s", file, name)
	}
	return out
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return fmt.Sprintf("%T", e)
}

func docSendOpcodes(t *testing.T, consts map[string]uint64) string {
	return pairTable(t, "sendOpcodes", consts, 0, "| ctrl opcode | MLX5_OPCODE_ (uverbs/mlx5) | carried out as |\n|---|---|---|\n",
		func(p [2]string) string {
			v, ok := consts[p[0]]
			if !ok || sendOpcodes[uint8(v)] == 0 {
				t.Fatalf("no value for %s, or sendOpcodes[%s] is unsupported", p[0], p[0])
			}
			return fmt.Sprintf("| 0x%02x | %s | %s |\n", v, strings.TrimPrefix(p[0], "uverbs."), p[1])
		})
}

func docCQESyndromes(t *testing.T, consts map[string]uint64) string {
	return pairTable(t, "syndromes", consts, 1, "| completion status | error CQE syndrome |\n|---|---|\n",
		func(p [2]string) string {
			return fmt.Sprintf("| %s | 0x%02x %s |\n", p[0], consts[p[1]], strings.TrimPrefix(p[1], "uverbs."))
		}) + fmt.Sprintf("| any other | 0x%02x SyndromeLocalQPOpErr |\n", consts["uverbs.SyndromeLocalQPOpErr"])
}

// pairTable is a Markdown table of mapping.go's map literal name, a row
// per key-value pair, ordered by the value of the constant in column col.
func pairTable(t *testing.T, name string, consts map[string]uint64, col int, head string, row func([2]string) string) string {
	pairs := mapPairs(t, "mapping.go", name)
	sort.Slice(pairs, func(i, j int) bool { return consts[pairs[i][col]] < consts[pairs[j][col]] })
	var b strings.Builder
	b.WriteString(head)
	for _, p := range pairs {
		b.WriteString(row(p))
	}
	return b.String()
}

// constValues evaluates the untyped and typed integer constants written
// as literals in the packages in dirs, keyed pkg.Name (the package's
// name as its importers spell it: the last path element; "." is this
// package, unqualified).
func constValues(t *testing.T, dirs ...string) map[string]uint64 {
	out := map[string]uint64{}
	for _, dir := range dirs {
		prefix := filepath.Base(dir) + "."
		if dir == "." {
			prefix = ""
		} else if prefix == "mlx5." {
			prefix = "uverbs." // imported as uverbs
		}
		eachConst(t, dir, func(vs *ast.ValueSpec) {
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
					if v, err := strconv.ParseUint(lit.Value, 0, 64); err == nil {
						out[prefix+n.Name] = v
					}
				}
			}
		})
	}
	return out
}

// eachConst calls fn with every constant declaration of the non-test Go
// files of dir.
func eachConst(t *testing.T, dir string, fn func(*ast.ValueSpec)) {
	eachFile(t, dir, func(f *ast.File) {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					if vs.Doc == nil && !g.Lparen.IsValid() {
						vs.Doc = g.Doc // const X = ... with its comment above
					}
					fn(vs)
				}
			}
		}
	})
}

// eachFile parses the non-test Go files of dir.
func eachFile(t *testing.T, dir string, fn func(*ast.File)) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		fileNames[f] = name
		fn(f)
	}
}

// docFields lists, per PRM structure of package ifc (a var block of
// F(offset, width) fields, headed by its comment), each field's bit
// offset and width and what the device (this package, not its fake
// driver) does with it: reads it (Get), writes it (Set), reads or writes
// the sub-structure (Bytes), or reaches it through a table (caps and
// registers) or another path; "-" is a field only the fake driver uses.
func docFields(t *testing.T) string {
	use := map[string]map[string]bool{}
	mark := func(field, how string) {
		if use[field] == nil {
			use[field] = map[string]bool{}
		}
		use[field][how] = true
	}
	eachFile(t, ".", func(f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				field := ifcName(sel.X)
				if field == "" {
					// ifc.PriPath(ifc.ADSX).Get and the like.
					if c, ok := sel.X.(*ast.CallExpr); ok && len(c.Args) == 1 && ifcName(c.Fun) != "" {
						field = ifcName(c.Args[0])
					}
				}
				if field == "" {
					return true
				}
				switch sel.Sel.Name {
				case "Get", "Get64":
					mark(field, "read")
				case "Set", "Set64":
					mark(field, "written")
				case "Bytes":
					mark(field, "sub-structure")
				}
			case *ast.SelectorExpr:
				if name := ifcName(n); name != "" {
					mark(name, "")
				}
			}
			return true
		})
	})
	ifcConsts := constValues(t, "ifc")
	var b strings.Builder
	eachFile(t, "ifc", func(f *ast.File) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			var rows []string
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					c, ok := vs.Values[i].(*ast.CallExpr)
					if !ok || exprString(c.Fun) != "F" || len(c.Args) != 2 {
						continue
					}
					off, ok1 := evalInt(c.Args[0], ifcConsts)
					w, ok2 := evalInt(c.Args[1], ifcConsts)
					if !ok1 || !ok2 {
						t.Fatalf("ifc.%s: offset or width not a constant expression of literals", n.Name)
					}
					how := "-"
					if u, ok := use[n.Name]; ok {
						var hs []string
						for _, h := range []string{"read", "written", "sub-structure"} {
							if u[h] {
								hs = append(hs, h)
							}
						}
						how = strings.Join(hs, ", ")
						if how == "" {
							how = "through a table or a helper"
						}
					}
					note := ""
					if vs.Comment != nil {
						note = " (" + strings.ReplaceAll(strings.TrimSpace(vs.Comment.Text()), "|", "\\|") + ")"
					}
					rows = append(rows, fmt.Sprintf("| %s%s | 0x%x | %d | %s |", n.Name, note, off, w, how))
				}
			}
			if len(rows) == 0 {
				continue
			}
			if g.Doc == nil {
				t.Errorf("%s: a block of fields (%s) without a comment naming its structure", fileName(f), rows[0])
				continue
			}
			head := strings.Join(strings.Fields(g.Doc.Text()), " ")
			fmt.Fprintf(&b, "\n**%s** (`emu/mlx5/ifc/%s`)\n\n| ifc field | bit offset | bits | the device |\n|---|---:|---:|---|\n%s\n",
				head, filepath.Base(fileName(f)), strings.Join(rows, "\n"))
		}
	})
	return b.String()
}

// evalInt evaluates an integer constant expression of literals, the
// constants of package ifc (consts, keyed ifc.Name) and + - * | << >>.
func evalInt(e ast.Expr, consts map[string]uint64) (uint64, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		v, err := strconv.ParseUint(e.Value, 0, 64)
		return v, err == nil
	case *ast.Ident:
		v, ok := consts["ifc."+e.Name]
		return v, ok
	case *ast.ParenExpr:
		return evalInt(e.X, consts)
	case *ast.BinaryExpr:
		x, ok1 := evalInt(e.X, consts)
		y, ok2 := evalInt(e.Y, consts)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch e.Op {
		case token.ADD:
			return x + y, true
		case token.SUB:
			return x - y, true
		case token.MUL:
			return x * y, true
		case token.OR:
			return x | y, true
		case token.SHL:
			return x << y, true
		case token.SHR:
			return x >> y, true
		}
	}
	return 0, false
}

// fileNames remembers which file each parsed ast.File came from.
var fileNames = map[*ast.File]string{}

func fileName(f *ast.File) string { return fileNames[f] }

// ifcName is X for the expression ifc.X, else "".
func ifcName(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == "ifc" {
		return sel.Sel.Name
	}
	return ""
}
