package designdoc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// listed is what go list says of one package.
type listed struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	Imports    []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// goList lists every package under root with its imports. Only the
// package's own files count: a test's imports are the test's business.
func goList(t *testing.T, root string) []listed {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		// go test puts its GOROOT's bin first on the PATH; this is for a
		// test binary run by hand.
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(gobin, "list", "-e", "-json=ImportPath,Dir,Name,GoFiles,Imports,Module,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list ./...: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list ./...: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// modulePath is the path the go.mod at root declares.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	t.Fatal("go.mod declares no module")
	return ""
}

// importTable is the design's table of relay's imports: for each package,
// by its directory from the module's root, the directories of relay's
// packages it imports.
func importTable(t *testing.T, root string) map[string][]string {
	t.Helper()
	rows := tables(t, root, "package", "imports (of relay's)")
	if len(rows) == 0 {
		t.Fatalf("%s: no | package | imports (of relay's) | table", designPath)
	}
	type entry struct {
		line    int
		imports []string
	}
	entries := map[string]entry{}
	for _, r := range rows {
		if len(r.cells) != 2 {
			t.Fatalf("%s:%d: an import row has 2 cells, this one %d", designPath, r.line, len(r.cells))
		}
		pkgs, ok := codeList(r.cells[0])
		if !ok {
			t.Fatalf("%s:%d: %q is not a list of `dir/of/package`", designPath, r.line, r.cells[0])
		}
		var imports []string
		if r.cells[1] != "none" {
			if imports, ok = codeList(r.cells[1]); !ok {
				t.Fatalf("%s:%d: %q is neither `none` nor a list of `package`", designPath, r.line, r.cells[1])
			}
		}
		for _, p := range pkgs {
			if _, dup := entries[p]; dup {
				t.Fatalf("%s:%d: %s has a second row", designPath, r.line, p)
			}
			entries[p] = entry{line: r.line, imports: imports}
		}
	}
	// An import is named by its package's name when no other package of
	// the table has that name, else by its directory.
	byName := map[string][]string{}
	for p := range entries {
		byName[path.Base(p)] = append(byName[path.Base(p)], p)
	}
	table := map[string][]string{}
	for p, e := range entries {
		dirs := []string{}
		for _, name := range e.imports {
			switch {
			case entries[name].line != 0:
				dirs = append(dirs, name)
			case len(byName[name]) == 1:
				dirs = append(dirs, byName[name][0])
			case len(byName[name]) > 1:
				t.Fatalf("%s:%d: %s names more than one package (%s): give its directory", designPath, e.line, name, strings.Join(byName[name], ", "))
			default:
				t.Fatalf("%s:%d: %s imports %s, which has no row of its own", designPath, e.line, p, name)
			}
		}
		table[p] = dirs
	}
	return table
}

// TestPackagesImportWhatTheDesignSays holds every package of the module to
// its row of the design's import table: it imports exactly the packages
// of relay's that the row names, so an import against the arrows fails
// here, and so does a row that says more than the code does. Test files'
// imports are not counted. A row's package that this module no longer
// holds is skipped when its directory is a module of its own.
func TestPackagesImportWhatTheDesignSays(t *testing.T) {
	root := moduleRoot(t)
	mod := modulePath(t, root)
	table := importTable(t, root)
	// dir is a package of relay's, by its directory from the root; ok is
	// false for a package of anyone else.
	dir := func(importPath string) (string, bool) {
		if importPath == mod {
			return ".", true
		}
		return strings.CutPrefix(importPath, mod+"/")
	}
	checked := map[string]bool{}
	for _, p := range goList(t, root) {
		if p.Module == nil || p.Module.Path != mod {
			continue
		}
		d, ok := dir(p.ImportPath)
		if !ok {
			continue
		}
		checked[d] = true
		allowed, ok := table[d]
		if !ok {
			t.Errorf("%s has no row in %s's import table", d, designPath)
			continue
		}
		var imports []string
		for _, imp := range p.Imports {
			if id, ok := dir(imp); ok {
				imports = append(imports, id)
			}
		}
		for _, id := range imports {
			if !slices.Contains(allowed, id) {
				t.Errorf("%s imports %s, which its row of %s's import table does not allow", d, id, designPath)
			}
		}
		for _, id := range allowed {
			if !slices.Contains(imports, id) {
				t.Errorf("%s's row of %s's import table names %s, which it does not import", d, designPath, id)
			}
		}
	}
	for d := range table {
		if checked[d] {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(d), "go.mod")); err == nil {
			continue // a module of its own, built apart from this one
		}
		t.Errorf("%s's import table has a row for %s, which is no package of this module", designPath, d)
	}
}
