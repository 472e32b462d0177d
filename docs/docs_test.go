// Package docs holds the tests that keep the documentation true: every
// resource and annotation name the code defines is in the user guide, every
// Pod spec in README.md and the user guide is a Pod the scheduler accepts,
// every make target the docs name exists, and every Helm value they name is
// in the chart's values.yaml.
package docs

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/region"
)

const root = ".."

// Names users put in Pod specs: each must appear in a Pod example of the
// user guide. The resource names are built from resource.Domain, so they
// are listed by constant, not found as literals.
var (
	resources = []string{resource.GPU, resource.Memory, resource.Core, resource.MIGPrefix}
	podSet    = []string{schedv1.PriorityAnnotation, allocation.PolicyAnnotation, translate.QueueAnnotation,
		translate.ModelsAnnotation, translate.CheckpointAnnotation, translate.DeadlineAnnotation, gang.GroupAnnotation, gang.MinMemberAnnotation, gang.LocalityAnnotation, annv1.BalloonKey}
	// Names tessera writes and users read.
	written = []string{annv1.AssignmentKey, annv1.AllocatedKey, annv1.BorrowedKey, annv1.NodeGPUsKey, annv1.NodeBalloonsKey}
)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeNames finds every tessera.io/ name (not the domain itself) of the
// product code: string literals, and string constants however they are
// built (resource.GPU is resource.Domain + "gpu").
func codeNames(t *testing.T, dirs ...string) []string {
	t.Helper()
	name := regexp.MustCompile(`^tessera\.io/[a-z0-9][a-z0-9.-]*$`)
	seen := map[string]bool{}
	files := map[string][]*ast.File{} // package name → its files
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files[f.Name.Name] = append(files[f.Name.Name], f)
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && name.MatchString(s) {
						seen[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range stringConstants(files) {
		if name.MatchString(v) {
			seen[v] = true
		}
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// stringConstants evaluates the string constants of the packages' files
// that are literals or sums of literals and other such constants (Domain +
// "gpu", resource.Domain + "x"), keyed by package.Name. A selector's
// package is taken to be named as it is imported.
func stringConstants(files map[string][]*ast.File) map[string]string {
	consts := map[string]string{}
	var eval func(pkg string, e ast.Expr) (string, bool)
	eval = func(pkg string, e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			v, ok := consts[pkg+"."+e.Name]
			return v, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				v, ok := consts[x.Name+"."+e.Sel.Name]
				return v, ok
			}
		case *ast.ParenExpr:
			return eval(pkg, e.X)
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				l, lok := eval(pkg, e.X)
				r, rok := eval(pkg, e.Y)
				return l + r, lok && rok
			}
		}
		return "", false
	}
	for grew := true; grew; { // until no constant resolves anew
		grew = false
		for pkg, fs := range files {
			for _, f := range fs {
				for _, decl := range f.Decls {
					gd, ok := decl.(*ast.GenDecl)
					if !ok || gd.Tok != token.CONST {
						continue
					}
					for _, spec := range gd.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, id := range vs.Names {
							if _, done := consts[pkg+"."+id.Name]; done || i >= len(vs.Values) {
								continue
							}
							if v, ok := eval(pkg, vs.Values[i]); ok {
								consts[pkg+"."+id.Name], grew = v, true
							}
						}
					}
				}
			}
		}
	}
	return consts
}

// TestCodeNamesSeeConstants: names built from constants are found, not only
// literals (a new resource is Domain + "something").
func TestCodeNamesSeeConstants(t *testing.T) {
	got := codeNames(t, filepath.Join("docs", "testdata", "names"))
	want := []string{"tessera.io/gpu-new", "tessera.io/lit", "tessera.io/mig-x", "tessera.io/other-pkg"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("codeNames(docs/testdata/names) = %v, want %v", got, want)
	}
	found := codeNames(t, productDirs...)
	for _, r := range resources {
		if !contains(found, r) {
			t.Errorf("resource %s is not among the names found in the code", r)
		}
	}
}

// productDirs hold the product's code.
var productDirs = []string{"api", "cmd", "internal", "shim"}

// TestEveryNameIsInTheUserGuide: each resource and annotation name in the
// code is documented in the user guide, and each is classified here (a new
// one fails until it is both documented and classified).
func TestEveryNameIsInTheUserGuide(t *testing.T) {
	guide := read(t, "docs/user-guide.md")
	known := map[string]bool{}
	for _, list := range [][]string{resources, podSet, written} {
		for _, n := range list {
			known[n] = true
		}
	}
	found := codeNames(t, productDirs...)
	if len(found) < 10 {
		t.Fatalf("found only %d tessera.io/ names in the code: %v", len(found), found)
	}
	for _, n := range found {
		if !known[n] {
			t.Errorf("%s is in the code but not classified in docs_test.go (resource, set on pods, or written by tessera)", n)
		}
	}
	for n := range known {
		if !strings.Contains(guide, "`"+n) {
			t.Errorf("docs/user-guide.md does not name `%s`", n)
		}
	}
}

// yamlBlocks returns the fenced ```yaml blocks of a Markdown file.
func yamlBlocks(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestPodExamplesAreAcceptedPods: every Pod spec in README.md and the user
// guide decodes strictly as a Pod, its tessera names are real, the
// scheduler's translation accepts it, and its annotation values parse. The
// guide's examples together use every resource and every annotation users set.
func TestPodExamplesAreAcceptedPods(t *testing.T) {
	used := map[string]bool{}
	pods := 0
	for _, file := range []string{"README.md", "docs/user-guide.md"} {
		for i, block := range yamlBlocks(read(t, file)) {
			if !regexp.MustCompile(`(?m)^kind: Pod$`).MatchString(block) {
				continue
			}
			pods++
			var p corev1.Pod
			if err := yaml.UnmarshalStrict([]byte(block), &p); err != nil {
				t.Errorf("%s, yaml block %d: not a Pod: %v", file, i+1, err)
				continue
			}
			where := file + ": pod " + p.Name
			for _, c := range p.Spec.Containers {
				for res := range c.Resources.Limits {
					name := string(res)
					if strings.HasPrefix(name, resource.MIGPrefix) {
						name = resource.MIGPrefix
					}
					if strings.HasPrefix(string(res), resource.Domain) && !contains(resources, name) {
						t.Errorf("%s: unknown resource %s", where, res)
					}
					used[name] = true
				}
			}
			for k, v := range p.Annotations {
				if strings.HasPrefix(k, resource.Domain) && !contains(podSet, k) {
					t.Errorf("%s: %s is not an annotation users set", where, k)
				}
				used[k] = true
				if k == allocation.PolicyAnnotation {
					if _, err := region.ParsePolicy(v); err != nil {
						t.Errorf("%s: %s: %v", where, k, err)
					}
				}
				if k == annv1.BalloonKey && v != "true" {
					t.Errorf("%s: %s: %q, only \"true\" opts in", where, k, v)
				}
			}
			if _, _, err := translate.EnginePod(&p, schedv1.Default(), 1024); err != nil {
				t.Errorf("%s: the scheduler refuses it: %v", where, err)
			}
			checkDevicePluginScheduling(t, where, &p)
		}
	}
	if pods < 5 {
		t.Fatalf("only %d Pod examples found", pods)
	}
	for _, n := range append(append([]string{}, resources...), podSet...) {
		if !used[n] {
			t.Errorf("no Pod example uses %s", n)
		}
	}
}

// checkDevicePluginScheduling: the device plugin, with its default
// configuration, reads the pod's priority and compute policy as written (it
// has its own priority table; a name only the scheduler knows makes it fall
// back to guaranteed at the lowest priority, dropping compute-policy too).
func checkDevicePluginScheduling(t *testing.T, where string, p *corev1.Pod) {
	t.Helper()
	table, err := priority.ComputeTable(configv1.Default().ComputePriority)
	if err != nil {
		t.Fatal(err)
	}
	got, err := allocation.SchedulingOf(p, table)
	if err != nil {
		t.Errorf("%s: the device plugin's default configuration refuses its annotations (it would run guaranteed at P3): %v", where, err)
		return
	}
	if want, err := region.ParsePolicy(p.Annotations[allocation.PolicyAnnotation]); err == nil && got.Policy != want {
		t.Errorf("%s: the device plugin applies compute policy %s, the example asks for %q", where, got, p.Annotations[allocation.PolicyAnnotation])
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// codeSpans are the inline code spans and fenced code blocks' lines of a
// Markdown file: where commands and values are written.
func codeSpans(md string) []string {
	var out []string
	fences := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	for _, m := range fences.FindAllStringSubmatch(md, -1) {
		out = append(out, strings.Split(m[1], "\n")...)
	}
	prose := fences.ReplaceAllString(md, "")
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(prose, -1) {
		out = append(out, m[1])
	}
	return out
}

func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, filepath.Join(root, "README.md"))
}

// makeTargets is every target make knows (its database, nothing run).
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-C", abs, "-pq", "--no-print-directory", "__docs_test_no_such_target__")
	out, _ := cmd.Output() // exits 2: the goal does not exist; the database is printed first
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([^\s#%:=][^:=]*?):(?:[^=]|$)`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := rule.FindStringSubmatch(line); m != nil {
			for _, tg := range strings.Fields(m[1]) {
				targets[strings.TrimPrefix(tg, abs+"/")] = true
			}
		}
	}
	if !targets["test"] || !targets["demo"] {
		t.Fatalf("make's database lists no test or demo target (make -pq said %d bytes)", len(out))
	}
	return targets
}

// TestMakeTargetsInDocsExist: every `make <target>` in the docs' code is a
// target of the Makefile or a fragment.
func TestMakeTargetsInDocsExist(t *testing.T) {
	targets := makeTargets(t)
	invocation := regexp.MustCompile(`(?:^|[\s;&|(])make\s+((?:[^\s;&|)#]+\s*)+)`)
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range codeSpans(string(b)) {
			for _, m := range invocation.FindAllStringSubmatch(span, -1) {
				args := strings.Fields(m[1])
				for i := 0; i < len(args); i++ {
					a := args[i]
					switch {
					case a == "-C" || a == "-f" || a == "-j":
						i++ // the option's argument
					case strings.HasPrefix(a, "-") || strings.Contains(a, "=") || strings.ContainsAny(a, "`'\"$<>…*"):
					default:
						checked++
						if !targets[a] {
							t.Errorf("%s: `make %s`: no such target", filepath.Base(file), a)
						}
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d make targets found in the docs", checked)
	}
}

// freeForm are values whose keys are the components' own configuration
// (validated by their parsers, not listed in values.yaml).
var freeForm = []string{"node.devicePlugin.config", "node.monitor.config", "scheduler.queues"}

// TestHelmValuesInDocsExist: every Helm value the docs name (`a.b.c`,
// `a.b=c`, `a.b: c`, --set a.b=c) is a key of the chart's values.yaml.
func TestHelmValuesInDocsExist(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "deploy/helm/tessera/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	var tops []string
	for k := range values {
		tops = append(tops, regexp.QuoteMeta(k))
	}
	ref := regexp.MustCompile(`(?:^|--set\s+|\s)((?:` + strings.Join(tops, "|") + `)(?:\.[A-Za-z][A-Za-z0-9]*)+)(?:$|=|:\s|\s)`)
	fileLike := regexp.MustCompile(`\.(md|go|yaml|sh|so|csv|json|txt)$`)
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range codeSpans(string(b)) {
			for _, m := range ref.FindAllStringSubmatch(span, -1) {
				path := m[1]
				if fileLike.MatchString(path) {
					continue
				}
				checked++
				if err := lookup(values, path); err != "" {
					t.Errorf("%s: Helm value `%s`: %s", filepath.Base(file), path, err)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d Helm values found in the docs", checked)
	}
}

// lookup walks a dotted path through values; "" when it exists (or lies
// under a free-form configuration that exists).
func lookup(values map[string]any, path string) string {
	var cur any = values
	parts := strings.Split(path, ".")
	for i, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return strings.Join(parts[:i], ".") + " is not a map"
		}
		next, ok := m[p]
		if !ok {
			for _, f := range freeForm {
				if strings.HasPrefix(path, f+".") && i >= len(strings.Split(f, ".")) {
					return ""
				}
			}
			return "no key " + p + " under " + strings.Join(parts[:i], ".") + " in values.yaml"
		}
		cur = next
	}
	return ""
}

// TestAllocatableExample: what the docs say an 8×H200 node advertises is
// what the device plugin's resource manager, with its default
// configuration, advertises for eight GPUs of the H200 memory size the user
// guide's tessera.io/node-gpus example shows.
func TestAllocatableExample(t *testing.T) {
	h200 := regexp.MustCompile(`"model":"NVIDIA H200","memoryMiB":(\d+)`).FindStringSubmatch(read(t, "docs/user-guide.md"))
	if h200 == nil {
		t.Fatal("docs/user-guide.md: no NVIDIA H200 in a tessera.io/node-gpus example")
	}
	mib, _ := strconv.ParseUint(h200[1], 10, 64)
	cfg := configv1.Default()
	var gpus []gpu.GPU
	for i := range 8 {
		gpus = append(gpus, gpu.GPU{UUID: "GPU-" + strconv.Itoa(i), Index: i, Model: "NVIDIA H200", MemoryBytes: mib << 20})
	}
	m, err := resource.NewManager(gpus, resource.Options{SplitCount: cfg.SplitCount, MemoryUnit: cfg.MemoryUnitBytes(),
		ReservedMemory: uint64(cfg.ReservedMemory.Value())})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, res := range []string{resource.GPU, resource.Memory, resource.Core} {
		for _, g := range gpus {
			want[strings.TrimPrefix(res, resource.Domain)] += m.Capacity(res, g.UUID)
		}
	}
	claim := regexp.MustCompile(`8×H200 node shows(.*?)\.(?:\s|$)`)
	amount := regexp.MustCompile("`(?:tessera\\.io/)?(gpu|gpu-mem|gpu-core): (\\d+)`")
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claim.FindAllStringSubmatch(strings.Join(strings.Fields(string(b)), " "), -1) {
			for _, a := range amount.FindAllStringSubmatch(c[1], -1) {
				checked++
				if n, _ := strconv.Atoi(a[2]); n != want[a[1]] {
					t.Errorf("%s: an 8×H200 node (%d MiB each) shows %s: %d, the device plugin advertises %d", filepath.Base(file), mib, a[1], n, want[a[1]])
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d amounts of an 8×H200 node found in the docs", checked)
	}
}

// annotationParsers are the readers of the annotations tessera writes.
var annotationParsers = map[string]func(string) error{
	annv1.AssignmentKey:   func(s string) error { _, err := annv1.ParseAssignment(s); return err },
	annv1.AllocatedKey:    func(s string) error { _, err := annv1.ParseAllocated(s); return err },
	annv1.NodeGPUsKey:     func(s string) error { _, err := annv1.ParseNodeGPUs(s); return err },
	annv1.BorrowedKey:     func(s string) error { _, err := annv1.ParseBorrowed(s); return err },
	annv1.NodeBalloonsKey: func(s string) error { _, err := annv1.ParseNodeBalloons(s); return err },
}

// elided turns a documented JSON example into a value: "GPU-…" is a UUID,
// ", …" a list's further items.
func elided(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, ", …", ""), "GPU-…", "GPU-0")
}

// TestAnnotationExamplesParse: every JSON value the user guide shows for an
// annotation is one its reader accepts: a kubectl line's output comment by
// the annotation it reads, and the inline examples by the annotation named
// just before them.
func TestAnnotationExamplesParse(t *testing.T) {
	guide := read(t, "docs/user-guide.md")
	checked := 0
	shown := regexp.MustCompile(`(?m)tessera\\\.io/([a-z-]+)\}'\n# (\{.*\})$`)
	for _, m := range shown.FindAllStringSubmatch(guide, -1) {
		checked++
		key := resource.Domain + m[1]
		parse, ok := annotationParsers[key]
		if !ok {
			t.Errorf("user guide shows %s, which tessera does not write", key)
			continue
		}
		if err := parse(elided(m[2])); err != nil {
			t.Errorf("user guide's %s example does not parse: %v", key, err)
		}
	}
	// "`tessera.io/a` and `tessera.io/b` look like `{…}` and `{…}`."
	pair := regexp.MustCompile("`(tessera\\.io/[a-z-]+)` and `(tessera\\.io/[a-z-]+)` look like\\s+`(\\{[^`]*\\})` and\\s+`(\\{[^`]*\\})`")
	for _, m := range pair.FindAllStringSubmatch(guide, -1) {
		for i, key := range []string{m[1], m[2]} {
			checked++
			if err := annotationParsers[key](elided(m[3+i])); err != nil {
				t.Errorf("user guide's %s example does not parse: %v", key, err)
			}
		}
	}
	if checked < len(annotationParsers) {
		t.Fatalf("only %d annotation examples found in the user guide, want one per annotation (%d)", checked, len(annotationParsers))
	}
}

// TestCodeSpansParse guards the extractors themselves with a known input.
func TestCodeSpansParse(t *testing.T) {
	md := "run `make demo` and\n```sh\nmake test\nhelm install x --set webhook.enabled=true\n```\n"
	got := strings.Join(codeSpans(md), "|")
	for _, want := range []string{"make demo", "make test", "--set webhook.enabled=true"} {
		if !bytes.Contains([]byte(got), []byte(want)) {
			t.Errorf("codeSpans(%q) = %q, lacks %q", md, got, want)
		}
	}
}

// TestCodePathsInDocsExist: every repository path the docs name in code
// (`internal/region`, [cmd/vgpu-monitor], …) exists, so a diagram or table
// cannot point at code that moved or went.
func TestCodePathsInDocsExist(t *testing.T) {
	path := regexp.MustCompile(`(?:^|[\s\[(])((?:api|cmd|internal|shim|test|deploy|hack)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	checked := 0
	for _, file := range []string{"README.md", "docs/architecture.md", "docs/user-guide.md"} {
		for _, span := range codeSpans(read(t, file)) {
			for _, m := range path.FindAllStringSubmatch(span, -1) {
				checked++
				if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
					t.Errorf("%s names %s, which is not in the repository", file, m[1])
				}
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d paths found", checked)
	}
}
