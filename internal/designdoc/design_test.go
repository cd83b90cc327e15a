package designdoc

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designPath is the design, from the module's root.
const designPath = "docs/design.md"

// row is one row of a table of the design, its cells trimmed.
type row struct {
	line  int // 1-based, in the design
	cells []string
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// tables returns the rows (header and separator left out) of every table
// of the design whose header cells are header.
func tables(t *testing.T, root string, header ...string) []row {
	t.Helper()
	f, err := os.Open(filepath.Join(root, designPath))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := splitRow(line)
		switch {
		case in && isSeparator(cells):
		case in:
			rows = append(rows, row{line: n, cells: cells})
		default:
			in = slices.Equal(cells, header)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// splitRow splits a table row into its cells at the pipes outside code
// spans.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	code := false
	start := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '`':
			code = !code
		case '|':
			if !code {
				cells = append(cells, strings.TrimSpace(line[start:i]))
				start = i + 1
			}
		}
	}
	return append(cells, strings.TrimSpace(line[start:]))
}

var separatorCell = regexp.MustCompile(`^:?-+:?$`)

func isSeparator(cells []string) bool {
	for _, c := range cells {
		if !separatorCell.MatchString(c) {
			return false
		}
	}
	return true
}

// codeList is the code spans of a cell written as "`a`, `b`, `c`"; ok is
// false for a cell of any other form.
func codeList(cell string) (spans []string, ok bool) {
	for part := range strings.SplitSeq(cell, ", ") {
		if len(part) < 3 || part[0] != '`' || part[len(part)-1] != '`' || strings.Contains(part[1:len(part)-1], "`") {
			return nil, false
		}
		spans = append(spans, part[1:len(part)-1])
	}
	return spans, len(spans) > 0
}
