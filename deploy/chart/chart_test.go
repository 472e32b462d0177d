package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/deploy/imagebuild"
)

// helmBinary is the helm the make target built (hack/e2e-binaries.sh helm).
// The chart tests need it: `make chart-test` builds it first, and this
// module is not part of the root module's `go test ./...`.
func helmBinary(t *testing.T) string {
	t.Helper()
	h := os.Getenv("TESSERA_HELM")
	if h == "" {
		cache := os.Getenv("TESSERA_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "tessera")
		}
		h = filepath.Join(cache, "bin", "helm-v3.22.0")
	}
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("helm: %v (run `make chart-test`, which builds it with hack/e2e-binaries.sh helm)", err)
	}
	return h
}

type rendered struct {
	Rendering
	manifest []byte
	objects  []runtime.Object
	// other are objects of kinds client-go's scheme does not know
	// (Prometheus Operator CRDs), checked by apiVersion/kind only.
	other []*unstructured.Unstructured
}

// strict decodes every kind client-go knows, failing on unknown fields: a
// misspelt field in a template is an error, not a silently dropped setting.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

var (
	renderOnce sync.Once
	renderings []rendered
	renderErr  error
)

// renderAll renders every set of values once per test binary.
func renderAll(t *testing.T) []rendered {
	t.Helper()
	helm := helmBinary(t)
	renderOnce.Do(func() { renderings, renderErr = render(helm) })
	if renderErr != nil {
		t.Fatal(renderErr)
	}
	return renderings
}

func render(helm string) ([]rendered, error) {
	rs, err := Renderings(chartDir)
	if err != nil {
		return nil, err
	}
	if len(rs) < 3 {
		return nil, fmt.Errorf("renderings %v: want the defaults and at least two ci values files", rs)
	}
	var out []rendered
	for _, r := range rs {
		m, err := Template(helm, chartDir, r)
		if err != nil {
			return nil, err
		}
		rr, err := decodeManifest(r, m)
		if err != nil {
			return nil, err
		}
		out = append(out, rr)
	}
	return out, nil
}

// decodeManifest splits a rendering into objects, each decoded strictly.
func decodeManifest(r Rendering, m []byte) (rendered, error) {
	rr := rendered{Rendering: r, manifest: m}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(m)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rendered{}, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := sigsyaml.Unmarshal(doc, &u.Object); err != nil {
			return rendered{}, fmt.Errorf("%s: %v\n%s", r.Name, err, doc)
		}
		if u.GroupVersionKind().Group == "monitoring.coreos.com" {
			rr.other = append(rr.other, u)
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return rendered{}, fmt.Errorf("%s: %s %s does not decode strictly: %v", r.Name, u.GetKind(), u.GetName(), err)
		}
		rr.objects = append(rr.objects, obj)
	}
	return rr, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// TestLint: helm lint --strict passes for every set of values.
func TestLint(t *testing.T) {
	helm := helmBinary(t)
	rs, err := Renderings(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if out, err := Lint(helm, chartDir, r); err != nil {
			t.Errorf("%s: %v\n%s", r.Name, err, out)
		}
	}
}

// TestManifestsInSync: deploy/manifests is what the chart renders now.
func TestManifestsInSync(t *testing.T) {
	for _, r := range renderAll(t) {
		path := ManifestPath("../manifests", r.Rendering)
		have, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run `make manifests`)", err)
		}
		if want := append([]byte(Header(r.Rendering)), r.manifest...); !bytes.Equal(have, want) {
			t.Errorf("%s differs from the chart's rendering: run `make manifests`", path)
		}
	}
	entries, _ := os.ReadDir("../manifests")
	if len(entries) != len(renderAll(t)) {
		t.Errorf("deploy/manifests has %d files, the chart %d renderings: remove stale ones", len(entries), len(renderAll(t)))
	}
}

func find[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func podSpecs(objs []runtime.Object) map[string]corev1.PodSpec {
	out := map[string]corev1.PodSpec{}
	for _, d := range find[*appsv1.DaemonSet](objs) {
		out["DaemonSet/"+d.Name] = d.Spec.Template.Spec
	}
	for _, d := range find[*appsv1.Deployment](objs) {
		out["Deployment/"+d.Name] = d.Spec.Template.Spec
	}
	return out
}

func chartMeta(t *testing.T) (appVersion string, values map[string]any) {
	t.Helper()
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	data, _ := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err := sigsyaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	return c.AppVersion, values
}

// TestImagesAreTheChartsRelease: every container of the default rendering
// runs <image.repository>/<component>:<appVersion> — the names `make
// images` writes — and every component image is used.
func TestImagesAreTheChartsRelease(t *testing.T) {
	appVersion, values := chartMeta(t)
	repo := values["image"].(map[string]any)["repository"].(string)
	used := map[string]bool{}
	re := regexp.MustCompile("^" + regexp.QuoteMeta(repo) + `/([a-z-]+):(.+)$`)
	for _, r := range renderAll(t) {
		for name, spec := range podSpecs(r.objects) {
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				m := re.FindStringSubmatch(c.Image)
				if m == nil {
					t.Errorf("%s %s/%s: image %q is not %s/<component>:<tag>", r.Name, name, c.Name, c.Image, repo)
					continue
				}
				wantTag := appVersion
				if r.Name == "simulated-node" {
					wantTag = "e2e" // its values set image.tag
				}
				if m[2] != wantTag {
					t.Errorf("%s %s/%s: tag %s, want %s", r.Name, name, c.Name, m[2], wantTag)
				}
				if r.Name == "default" {
					used[m[1]] = true
				}
			}
		}
	}
	// The images `make images` builds are exactly the ones the chart runs.
	for c := range imagebuild.Components("bin", "lib") {
		if !used[c] {
			t.Errorf("image %s/%s is built but unused by the default rendering", repo, c)
		}
		delete(used, c)
	}
	for c := range used {
		t.Errorf("the chart runs %s/%s, which `make images` does not build", repo, c)
	}
}

// TestHostPathsAreDocumented: every hostPath a rendering mounts is in the
// operator guide's host path table.
func TestHostPathsAreDocumented(t *testing.T) {
	guide, err := os.ReadFile("../../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(guide)[strings.Index(string(guide), "### Host paths"):]
	section = section[:strings.Index(section, "\n### ")]
	for _, r := range renderAll(t) {
		for name, spec := range podSpecs(r.objects) {
			for _, v := range spec.Volumes {
				if v.HostPath == nil {
					continue
				}
				// Paths set through values are documented by the value's row.
				documented := strings.Contains(section, "`"+v.HostPath.Path+"`") ||
					v.Name == "driver-libraries" && strings.Contains(section, "`node.driver.libraryDir`") ||
					slices.Contains(extraMountNames(t, r.Rendering), v.Name) && strings.Contains(section, "`node.driver.extraMounts`")
				if !documented {
					t.Errorf("%s %s: hostPath %s (volume %s) is not in docs/operator-guide.md's host path table", r.Name, name, v.HostPath.Path, v.Name)
				}
			}
		}
	}
}

// extraMountNames are the node.driver.extraMounts a rendering's values add.
func extraMountNames(t *testing.T, r Rendering) []string {
	t.Helper()
	if r.ValuesFile == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(chartDir, r.ValuesFile))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Node struct {
			Driver struct {
				ExtraMounts []struct {
					Name string `json:"name"`
				} `json:"extraMounts"`
			} `json:"driver"`
		} `json:"node"`
	}
	if err := sigsyaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range v.Node.Driver.ExtraMounts {
		names = append(names, m.Name)
	}
	return names
}

// rule is one RBAC rule per resource, as the operator guide lists it.
type rule struct{ account, kind, group, resource, verbs string }

func (r rule) String() string {
	return fmt.Sprintf("%s %s %s %s [%s]", r.account, r.kind, r.group, r.resource, r.verbs)
}

// balloonsOnly starts the "why" of an operator guide RBAC row that the chart
// grants only with memory balloons on.
const balloonsOnly = "only with `node.monitor.config.balloon.enabled`:"

// TestRBACIsExactlyTheDocumentedSet: the default rendering's rules, split
// per resource, equal the operator guide's RBAC table row for row, less the
// rows granted only with memory balloons on; the balloons rendering's equal
// every row; and the scheduler's Role stays in the release namespace.
func TestRBACIsExactlyTheDocumentedSet(t *testing.T) {
	guide, _ := os.ReadFile("../../docs/operator-guide.md")
	var all, base []string
	row := regexp.MustCompile(`^\| (node|scheduler) \| (ClusterRole|Role) \| ([a-z0-9.]+) \| ([a-z/]+(?: \(named\))?) \| ([a-z, ]+) \| (.+) \|$`)
	for _, l := range strings.Split(string(guide), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			r := rule{m[1], m[2], m[3], m[4], m[5]}.String()
			all = append(all, r)
			if !strings.HasPrefix(m[6], balloonsOnly) {
				base = append(base, r)
			}
		}
	}
	if len(base) == 0 || len(base) == len(all) {
		t.Fatalf("operator guide: %d RBAC rows, %d of them without balloons: want both kinds", len(all), len(base))
	}
	checked := 0
	for _, r := range renderAll(t) {
		want := map[string][]string{"default": base, "balloons": all}[r.Name]
		if want == nil {
			continue
		}
		checked++
		got := rbacRules(t, r)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: rendered RBAC:\n  %s\ndocumented:\n  %s", r.Name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	if checked != 2 {
		t.Fatalf("checked %d renderings, want default and balloons", checked)
	}
}

// rbacRules are a rendering's rules, split per resource, as the operator
// guide lists them.
func rbacRules(t *testing.T, r rendered) []string {
	t.Helper()
	// The objects the components use, by resource.
	namedObjects := map[string]string{"leases": "tessera-scheduler", "configmaps": "tessera-scheduler-queues"}
	var got []string
	add := func(account, kind string, rules []rbacv1.PolicyRule) {
		for _, pr := range rules {
			for _, g := range pr.APIGroups {
				for _, res := range pr.Resources {
					if g == "" {
						g = "core"
					}
					if len(pr.NonResourceURLs) > 0 {
						t.Errorf("%s: unexpected nonResourceURLs in %+v", account, pr)
					}
					if len(pr.ResourceNames) > 0 {
						// A named rule names exactly the object the component uses.
						if want := namedObjects[res]; !slices.Equal(pr.ResourceNames, []string{want}) {
							t.Errorf("%s: %s resourceNames %v, want [%s]", account, res, pr.ResourceNames, want)
						}
						res += " (named)"
					}
					got = append(got, rule{account, kind, g, res, strings.Join(pr.Verbs, ", ")}.String())
				}
			}
		}
	}
	account := func(name string) string { return name[strings.LastIndex(name, "-")+1:] }
	for _, cr := range find[*rbacv1.ClusterRole](r.objects) {
		add(account(cr.Name), "ClusterRole", cr.Rules)
	}
	for _, ro := range find[*rbacv1.Role](r.objects) {
		if ro.Namespace != Namespace {
			t.Errorf("%s: Role %s in %q, want the release namespace", r.Name, ro.Name, ro.Namespace)
		}
		add(account(ro.Name), "Role", ro.Rules)
	}
	return got
}

// TestConfigMapsParseWithTheComponentsOwnParsers: the device plugin's and
// the monitor's config files and the scheduler's queue config in every
// rendering are accepted, strictly, by api/config/v1 and api/scheduler/v1,
// and say what the values asked for.
func TestConfigMapsParseWithTheComponentsOwnParsers(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, cm := range find[*corev1.ConfigMap](r.objects) {
			for key, body := range cm.Data {
				var err error
				switch key {
				case "device-plugin.yaml":
					c := configv1.Default()
					c.NodeName = "gpu-node-1" // $NODE_NAME at run time
					if err = configv1.Parse([]byte(body), c); err == nil {
						err = c.Validate()
					}
					if err == nil && r.Name == "simulated-node" && c.DeviceListStrategy != configv1.DeviceListCDICRI {
						err = fmt.Errorf("deviceListStrategy %q, values say cdi-cri", c.DeviceListStrategy)
					}
					if err == nil && c.HookLibrary != "/usr/local/tessera/lib/libtessera-hook.so" {
						err = fmt.Errorf("hookLibrary %s is not in node.hostPaths.hookDir", c.HookLibrary)
					}
				case "vgpu-monitor.yaml":
					c := configv1.DefaultMonitor()
					c.NodeName = "gpu-node-1"
					if err = configv1.ParseMonitor([]byte(body), c); err == nil {
						err = c.Validate()
					}
				case "config.yaml":
					_, err = schedv1.Parse([]byte(body))
				default:
					err = fmt.Errorf("unexpected key")
				}
				if err != nil {
					t.Errorf("%s ConfigMap %s key %s: %v\n%s", r.Name, cm.Name, key, err, body)
				}
			}
		}
	}
}

// TestWorkloadShape: what the issue and the components require of the
// objects: the DaemonSet never surges (one monitor per node), runs in the
// host pid namespace with NODE_NAME from the downward API; the scheduler has
// 2 replicas, leader election in the release namespace, its queue ConfigMap,
// and runs as non-root; the Prometheus objects and the admission policy
// appear only when asked for.
func TestWorkloadShape(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, ds := range find[*appsv1.DaemonSet](r.objects) {
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
				t.Errorf("%s: DaemonSet maxSurge %v, want 0", r.Name, ru)
			}
			if !ds.Spec.Template.Spec.HostPID {
				t.Errorf("%s: DaemonSet without hostPID", r.Name)
			}
			for _, c := range ds.Spec.Template.Spec.Containers {
				if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
					return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
				}) {
					t.Errorf("%s: %s has no NODE_NAME from spec.nodeName", r.Name, c.Name)
				}
			}
		}
		for _, d := range find[*appsv1.Deployment](r.objects) {
			spec := d.Spec.Template.Spec
			args := strings.Join(spec.Containers[0].Args, " ")
			for _, want := range []string{"run ", "--leader-elect=true", "--lease-namespace=" + Namespace, "--scheduler-name=tessera-scheduler",
				"--queue-config-map=" + Namespace + "/tessera-scheduler-queues", "--metrics-bind-address=:10259"} {
				if !strings.Contains(args, want) {
					t.Errorf("%s: scheduler args %q lack %q", r.Name, args, want)
				}
			}
			if *d.Spec.Replicas != 2 {
				t.Errorf("%s: %d scheduler replicas", r.Name, *d.Spec.Replicas)
			}
			if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.RunAsUser == 0 {
				t.Errorf("%s: scheduler not non-root: %+v", r.Name, sc)
			}
		}
		kinds := map[string]int{}
		for _, u := range r.other {
			kinds[u.GetKind()]++
		}
		for _, o := range r.objects {
			kinds[fmt.Sprintf("%T", o)]++
		}
		want := map[string][2]int{ // rendering → ServiceMonitors, admission policies
			"default": {0, 0}, "node-only": {0, 0}, "simulated-node": {2, 1},
		}[r.Name]
		if kinds["ServiceMonitor"] != want[0] || kinds["PodMonitor"] != want[0] || kinds["*v1.MutatingAdmissionPolicy"] != want[1] {
			t.Errorf("%s: kinds %v", r.Name, kinds)
		}
		if r.Name == "node-only" && (kinds["*v1.Deployment"] != 0 || kinds["*v1.ClusterRole"] != 0 || kinds["*v1.Service"] != 0) {
			t.Errorf("node-only rendered %v", kinds)
		}
	}
}

// TestMonitorMayRaiseTheArbiter: a monitor whose compute arbiter asks for a
// real-time control loop (arbiter.realtimePriority, on by default) gets
// CAP_SYS_NICE and nothing else it did not have; one that does not ask gets
// no SYS_NICE. A privileged container has every capability already.
func TestMonitorMayRaiseTheArbiter(t *testing.T) {
	checked := 0
	for _, r := range renderAll(t) {
		rt := map[string]bool{} // ConfigMap name → the arbiter asks for SCHED_FIFO
		for _, cm := range find[*corev1.ConfigMap](r.objects) {
			if body, ok := cm.Data["vgpu-monitor.yaml"]; ok {
				c := configv1.DefaultMonitor()
				if err := configv1.ParseMonitor([]byte(body), c); err != nil {
					t.Fatalf("%s: %v", r.Name, err)
				}
				rt[cm.Name] = c.Arbiter.Enabled && c.Arbiter.RealtimePriority > 0
			}
		}
		for _, ds := range find[*appsv1.DaemonSet](r.objects) {
			var wantRT bool
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					wantRT = wantRT || rt[v.ConfigMap.Name]
				}
			}
			for _, c := range ds.Spec.Template.Spec.Containers {
				sc := c.SecurityContext
				if c.Name != "vgpu-monitor" || sc == nil || (sc.Privileged != nil && *sc.Privileged) {
					continue
				}
				checked++
				var add []corev1.Capability
				if sc.Capabilities != nil {
					add = sc.Capabilities.Add
				}
				if got := slices.Contains(add, "SYS_NICE"); got != wantRT {
					t.Errorf("%s: monitor adds %v; the arbiter asks for a real-time loop: %v", r.Name, add, wantRT)
				}
				for _, a := range add {
					if a != "SYS_NICE" && a != "KILL" {
						t.Errorf("%s: monitor adds capability %s", r.Name, a)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no rendering has an unprivileged monitor container to check")
	}
}
