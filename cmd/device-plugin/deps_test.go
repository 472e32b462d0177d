package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyPackages register or link every Kubernetes API group. Linking any
// of them put the plugin at ~90 MiB VmRSS instead of ~36 MiB (see
// docs/device-plugin.md); internal/deviceplugin/kube is the plugin's client.
var heavyPackages = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/informers",
	"k8s.io/client-go/applyconfigurations",
	"k8s.io/client-go/discovery",
	"k8s.io/client-go/testing",
	"github.com/google/gnostic-models",
}

// TestLinksOnlyCoreV1 keeps the production and the simulation binary
// (which the RSS benchmark runs) free of the typed clientset and of every
// API group but core/v1.
func TestLinksOnlyCoreV1(t *testing.T) {
	for _, tags := range []string{"", "tessera_sim"} {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.HasPrefix(pkg, "k8s.io/api/") && pkg != "k8s.io/api/core/v1" {
				t.Errorf("tags %q: links API group %s", tags, pkg)
			}
			for _, heavy := range heavyPackages {
				if pkg == heavy || strings.HasPrefix(pkg, heavy+"/") {
					t.Errorf("tags %q: links %s", tags, pkg)
				}
			}
		}
	}
}
