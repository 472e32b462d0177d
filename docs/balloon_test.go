package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// declared lists the names a package directory declares: functions and
// methods, types, constants, variables, struct fields and interface methods;
// tests are the Test functions of its _test.go files.
func declared(t *testing.T, dir string) (names, tests map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no Go files (%v)", dir, err)
	}
	names, tests = map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		isTest := strings.HasSuffix(f, "_test.go")
		ast.Inspect(af, func(n ast.Node) bool {
			switch d := n.(type) {
			case *ast.FuncDecl:
				if isTest && strings.HasPrefix(d.Name.Name, "Test") {
					tests[d.Name.Name] = true
				} else if !isTest {
					names[d.Name.Name] = true
				}
			case *ast.TypeSpec:
				if !isTest {
					names[d.Name.Name] = true
				}
			case *ast.ValueSpec:
				for _, n := range d.Names {
					if !isTest {
						names[n.Name] = true
					}
				}
			case *ast.Field:
				for _, n := range d.Names {
					if !isTest {
						names[n.Name] = true
					}
				}
			}
			return true
		})
	}
	return names, tests
}

// TestBalloonRulesNameRealCode: every identifier the "Where the rules are
// kept" table of docs/balloon.md names is declared in the package of its
// column, every test it names is a test of that package, and every cell names
// at least one test: the document cannot credit a rule to code that does not
// exist or is not tested (it once credited a ledger no production code used).
func TestBalloonRulesNameRealCode(t *testing.T) {
	md := read(t, "docs/balloon.md")
	start := strings.Index(md, "### Where the rules are kept")
	if start < 0 {
		t.Fatal(`docs/balloon.md has no "### Where the rules are kept" section`)
	}
	section := md[start:]
	if end := strings.Index(section[1:], "\n#"); end >= 0 {
		section = section[:end+1]
	}
	span := regexp.MustCompile("`([^`]+)`")
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	var dirs []string
	type pkg struct{ names, tests map[string]bool }
	pkgs := map[string]pkg{}
	rows := 0
	for _, l := range strings.Split(section, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if dirs == nil { // the header: rule, then one package per column
			for _, c := range cells[1:] {
				m := span.FindStringSubmatch(c)
				if m == nil {
					t.Fatalf("column %q names no package directory", c)
				}
				names, tests := declared(t, m[1])
				dirs = append(dirs, m[1])
				pkgs[m[1]] = pkg{names, tests}
			}
			continue
		}
		rows++
		if len(cells) != len(dirs)+1 {
			t.Fatalf("row %q: %d cells, want %d", l, len(cells), len(dirs)+1)
		}
		for i, c := range cells[1:] {
			p, named := pkgs[dirs[i]], 0
			for _, m := range span.FindAllStringSubmatch(c, -1) {
				id := m[1]
				switch {
				case !ident.MatchString(id):
					t.Errorf("%s: %q in %q is not an identifier", dirs[i], id, cells[0])
				case strings.HasPrefix(id, "Test"):
					named++
					if !p.tests[id] {
						t.Errorf("%s: no test %s (rule %q)", dirs[i], id, cells[0])
					}
				case !p.names[id]:
					t.Errorf("%s: declares no %s (rule %q)", dirs[i], id, cells[0])
				}
			}
			if named == 0 {
				t.Errorf("%s: rule %q names no test", dirs[i], cells[0])
			}
		}
	}
	if rows < 4 {
		t.Fatalf("%d rules in the table, want the four of the Semantics' \"Never\"", rows)
	}
}
