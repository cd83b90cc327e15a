package designdoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A rule's where cell names, for each file that keeps the rule, the file
// from the module's root and what in it keeps the rule:
//
//	`internal/delivery/plan.go`: `Handler.plan`, `Handler.disable`; `internal/delivery/health.go`: `Handler.judge`
//
// A name is a function, type, constant or variable declared at the file's
// top level, or `Type.Name`: a method of Type (whatever its receiver's
// pointer or type parameters) or a field of the struct Type, declared in
// that file.
var (
	whereGroup = regexp.MustCompile("^`([a-z0-9_./-]+\\.go)`: (.+)$")
	declName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
)

// ruleRef is one name a rule row says its file declares.
type ruleRef struct {
	line       int
	file, name string
}

// ruleRefs parses the where cell of the row at line; it reports each part
// not in the cell's form.
func ruleRefs(t *testing.T, line int, cell string) []ruleRef {
	t.Helper()
	var refs []ruleRef
	for group := range strings.SplitSeq(cell, "; ") {
		m := whereGroup.FindStringSubmatch(group)
		if m == nil {
			t.Errorf("%s:%d: %q is not of the form `path/file.go`: `Name`, `Type.Method`", designPath, line, group)
			continue
		}
		names, ok := codeList(m[2])
		if !ok {
			t.Errorf("%s:%d: %q does not list names as `A`, `B.c`", designPath, line, m[2])
			continue
		}
		for _, n := range names {
			if !declName.MatchString(n) {
				t.Errorf("%s:%d: %q is not a Go name nor Type.Name", designPath, line, n)
				continue
			}
			refs = append(refs, ruleRef{line: line, file: m[1], name: n})
		}
	}
	return refs
}

// declared is every name a rule may give for the Go file at path.
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names[d.Name.Name] = true
			} else if len(d.Recv.List) == 1 {
				names[receiverType(d.Recv.List[0].Type)+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, fl := range st.Fields.List {
							for _, n := range fl.Names {
								names[s.Name.Name+"."+n.Name] = true
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names, nil
}

// receiverType is the type's name of a method's receiver: T of T, *T,
// T[P] and *T[P, Q].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestEveryRuleNamesWhatItsFileDeclares reads every "rule | where" table
// of the design and parses each file a rule names: the rule map fails here
// when a function is renamed or moved rather than when a reader looks for
// it.
func TestEveryRuleNamesWhatItsFileDeclares(t *testing.T) {
	root := moduleRoot(t)
	rows := tables(t, root, "rule", "where")
	// The delivery rules alone are more than twenty: finding fewer means
	// the tables were not found, not that the rules are all kept.
	if len(rows) < 20 {
		t.Fatalf("%s: found %d rule rows under a | rule | where | header, want the delivery rules and the outbox's", designPath, len(rows))
	}
	files := map[string]map[string]bool{}
	for _, r := range rows {
		if len(r.cells) != 2 {
			t.Errorf("%s:%d: a rule row has 2 cells, this one %d", designPath, r.line, len(r.cells))
			continue
		}
		for _, ref := range ruleRefs(t, r.line, r.cells[1]) {
			names, ok := files[ref.file]
			if !ok {
				var err error
				if names, err = declared(filepath.Join(root, filepath.FromSlash(ref.file))); err != nil {
					t.Errorf("%s:%d: %s: %v", designPath, ref.line, ref.file, err)
				}
				files[ref.file] = names
			}
			if names != nil && !names[ref.name] {
				t.Errorf("%s:%d: %s declares no %s", designPath, ref.line, ref.file, ref.name)
			}
		}
	}
}
