package kube

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewFromKubeconfig(t *testing.T) {
	srv := httptest.NewServer(&apiServer{})
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + srv.URL + `"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewFromKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.GetNode(context.Background(), "n"); err != nil || n.Name != "n" {
		t.Fatalf("node through the kubeconfig's server = %+v, %v", n, err)
	}

	_, err = NewFromKubeconfig(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "kubernetes client config") {
		t.Fatalf("missing kubeconfig: err = %v, want a client config error", err)
	}
}
