package designdoc

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every package says what it does in one place: the comment of its doc.go,
// which begins "Package <name>" ("Command <name>" for a command). No other
// file of the package carries a package comment, which go doc would join
// to it.
func TestEveryPackageSaysWhatItDoesInItsDocGo(t *testing.T) {
	root := moduleRoot(t)
	for _, p := range goList(t, root) {
		if p.Module == nil || len(p.GoFiles) == 0 {
			continue
		}
		if !slices.Contains(p.GoFiles, "doc.go") {
			t.Errorf("%s has no doc.go", p.ImportPath)
		}
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			text := ""
			if f.Doc != nil {
				text = f.Doc.Text()
			}
			switch {
			case name != "doc.go" && text != "":
				t.Errorf("%s: a package comment outside doc.go: %.60q", filepath.Join(p.ImportPath, name), text)
			case name != "doc.go":
			case p.Name == "main" && !strings.HasPrefix(text, "Command "+filepath.Base(p.Dir)+" "):
				t.Errorf("%s/doc.go: the comment must begin \"Command %s \"", p.ImportPath, filepath.Base(p.Dir))
			case p.Name != "main" && !strings.HasPrefix(text, "Package "+p.Name+" "):
				t.Errorf("%s/doc.go: the comment must begin \"Package %s \"", p.ImportPath, p.Name)
			}
		}
	}
}
