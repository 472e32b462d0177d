package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsyaml "sigs.k8s.io/yaml"
)

// templateWith renders the chart with release name release and extra helm
// arguments (--set ...), decoding every object strictly.
func templateWith(t *testing.T, release string, args ...string) rendered {
	t.Helper()
	all := append([]string{"template", release, chartDir, "--namespace", Namespace, "--kube-version", KubeVersion}, args...)
	m, err := run(helmBinary(t), all...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeManifest(Rendering{Name: release}, m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLongNamesStayValid: Helm admits release names up to 53 characters and
// fullnameOverride is cut at 63, but the chart appends component suffixes
// (-node, -scheduler-metrics, ...) to that prefix. Every object name must
// still be one the API server accepts (a Service's a DNS-1035 label of at
// most 63 characters), and every reference between objects (service
// account, ConfigMap, role, policy) must name an object the chart renders.
func TestLongNamesStayValid(t *testing.T) {
	all := []string{"--set", "webhook.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true"}
	cases := map[string][]string{
		// The longest release name Helm accepts (53), not containing "tessera".
		strings.Repeat("r", 53): all,
		"x":                     append([]string{"--set", "fullnameOverride=" + strings.Repeat("f", 70)}, all...),
		"y":                     append([]string{"--set", "nameOverride=" + strings.Repeat("n", 70)}, all...),
	}
	for release, args := range cases {
		r := templateWith(t, release, args...)
		if len(r.objects) == 0 {
			t.Fatalf("release %s rendered nothing", release)
		}
		names := map[string]bool{} // "Kind/name"
		for _, o := range r.objects {
			m, err := meta.Accessor(o)
			if err != nil {
				t.Fatal(err)
			}
			kind := fmt.Sprintf("%T", o)
			kind = kind[strings.LastIndex(kind, ".")+1:]
			names[kind+"/"+m.GetName()] = true
			errs := validation.IsDNS1123Subdomain(m.GetName())
			if kind == "Service" {
				errs = validation.IsDNS1035Label(m.GetName())
			}
			for _, e := range errs {
				t.Errorf("release %s: %s %q (%d characters): %s", release, kind, m.GetName(), len(m.GetName()), e)
			}
		}
		for _, u := range r.other {
			for _, e := range validation.IsDNS1123Subdomain(u.GetName()) {
				t.Errorf("release %s: %s %q: %s", release, u.GetKind(), u.GetName(), e)
			}
		}
		ref := func(what, key string) {
			if !names[key] {
				t.Errorf("release %s: %s names %s, which the chart does not render", release, what, key)
			}
		}
		for _, ds := range find[*appsv1.DaemonSet](r.objects) {
			checkPodRefs(ds.Name, ds.Spec.Template.Spec, ref)
		}
		for _, d := range find[*appsv1.Deployment](r.objects) {
			checkPodRefs(d.Name, d.Spec.Template.Spec, ref)
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if cm, ok := strings.CutPrefix(a, "--queue-config-map="+Namespace+"/"); ok {
					ref("the scheduler's --queue-config-map", "ConfigMap/"+cm)
				}
			}
		}
		for _, b := range find[*rbacv1.ClusterRoleBinding](r.objects) {
			ref(b.Name, b.RoleRef.Kind+"/"+b.RoleRef.Name)
			for _, s := range b.Subjects {
				ref(b.Name, "ServiceAccount/"+s.Name)
			}
		}
		for _, b := range find[*rbacv1.RoleBinding](r.objects) {
			ref(b.Name, b.RoleRef.Kind+"/"+b.RoleRef.Name)
			for _, s := range b.Subjects {
				ref(b.Name, "ServiceAccount/"+s.Name)
			}
		}
		for _, b := range find[*admissionv1.MutatingAdmissionPolicyBinding](r.objects) {
			ref(b.Name, "MutatingAdmissionPolicy/"+b.Spec.PolicyName)
		}
	}
}

func checkPodRefs(owner string, spec corev1.PodSpec, ref func(what, key string)) {
	ref(owner+"'s serviceAccountName", "ServiceAccount/"+spec.ServiceAccountName)
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			ref(owner+"'s volume "+v.Name, "ConfigMap/"+v.ConfigMap.Name)
		}
	}
}

// TestSchedulerUsesThePluginsMemoryUnit: tessera.io/gpu-mem counts units of
// the device plugin's memoryUnit; a scheduler counting in another unit
// would place pods by a wrong size. The chart has one value for both.
func TestSchedulerUsesThePluginsMemoryUnit(t *testing.T) {
	for _, unit := range []string{"", "512Mi"} {
		var args []string
		if unit != "" {
			args = []string{"--set", "node.devicePlugin.config.memoryUnit=" + unit}
		}
		r := templateWith(t, ReleaseName, args...)
		var pluginUnit string
		for _, cm := range find[*corev1.ConfigMap](r.objects) {
			if data, ok := cm.Data["device-plugin.yaml"]; ok {
				var c struct {
					MemoryUnit string `json:"memoryUnit"`
				}
				if err := sigsyaml.Unmarshal([]byte(data), &c); err != nil {
					t.Fatal(err)
				}
				pluginUnit = c.MemoryUnit
			}
		}
		if pluginUnit == "" || (unit != "" && pluginUnit != unit) {
			t.Fatalf("device plugin memoryUnit %q, want %q", pluginUnit, unit)
		}
		deps := find[*appsv1.Deployment](r.objects)
		if len(deps) != 1 {
			t.Fatalf("%d Deployments", len(deps))
		}
		if args := deps[0].Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--memory-unit="+pluginUnit) {
			t.Errorf("memoryUnit %s: scheduler args %q lack --memory-unit=%s", pluginUnit, args, pluginUnit)
		}
	}
}

// TestClashingMetricsPortsRefused: the device plugin and the monitor share
// the pod's network namespace; one port for both would leave the second
// to start crash-looping on "address already in use". The chart says so
// at install instead.
func TestClashingMetricsPortsRefused(t *testing.T) {
	_, err := run(helmBinary(t), "template", ReleaseName, chartDir, "--namespace", Namespace, "--kube-version", KubeVersion,
		"--set", "node.devicePlugin.metricsPort=9394", "--set", "node.monitor.metricsPort=9394")
	if err == nil || !strings.Contains(err.Error(), "node.monitor.metricsPort") {
		t.Errorf("one port for the plugin and the monitor: %v, want an error naming node.monitor.metricsPort", err)
	}
	// Without the monitor the port is free.
	templateWith(t, ReleaseName, "--set", "node.devicePlugin.metricsPort=9394", "--set", "node.monitor.metricsPort=9394", "--set", "node.monitor.enabled=false")
}

// TestPluginSeesTheHookItHandsOut: the device plugin stats its hookLibrary
// at start and logs an error ("CUDA hook library missing on the host")
// when it is not there; the path is a host path that kubelet mounts into
// containers. The plugin container must see the host's hook directory at
// that same path (read-only: the init container installs it), or every
// healthy node logs the error at every start.
func TestPluginSeesTheHookItHandsOut(t *testing.T) {
	for _, r := range renderAll(t) {
		var hookLibrary string
		for _, cm := range find[*corev1.ConfigMap](r.objects) {
			if data, ok := cm.Data["device-plugin.yaml"]; ok {
				var c struct {
					HookLibrary string `json:"hookLibrary"`
				}
				if err := sigsyaml.Unmarshal([]byte(data), &c); err != nil {
					t.Fatal(err)
				}
				hookLibrary = c.HookLibrary
			}
		}
		for _, ds := range find[*appsv1.DaemonSet](r.objects) {
			spec := ds.Spec.Template.Spec
			hostDirs := map[string]string{} // volume → host path
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostDirs[v.Name] = v.HostPath.Path
				}
			}
			for _, c := range spec.Containers {
				if c.Name != "device-plugin" {
					continue
				}
				dir := hookLibrary[:strings.LastIndex(hookLibrary, "/")]
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.MountPath == dir && hostDirs[m.Name] == dir && m.ReadOnly
				}) {
					t.Errorf("%s: device-plugin does not mount the host's %s read-only at the same path (hookLibrary %s); mounts %v", r.Name, dir, hookLibrary, c.VolumeMounts)
				}
			}
		}
	}
}

// TestValuesThatLookLikeOtherYAMLTypes: environment variable names are
// free text (YAML 1.1 reads ON, Y or NO as booleans, 1e3 as a number);
// every object must still decode, with the names as given.
func TestValuesThatLookLikeOtherYAMLTypes(t *testing.T) {
	r := templateWith(t, ReleaseName, "--set", "node.driver.env.ON=1", "--set", "node.driver.env.NO=off")
	for _, ds := range find[*appsv1.DaemonSet](r.objects) {
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, name := range []string{"ON", "NO"} {
				if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
					t.Errorf("%s: no env %s in %v", c.Name, name, c.Env)
				}
			}
		}
	}
}
