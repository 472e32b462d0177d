package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

func status(t *testing.T, url string) int {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// /readyz waits for PodResources (without it no series can be named);
// /healthz only says the process serves.
func TestReadyOnlyOncePodResourcesAnswered(t *testing.T) {
	cfg := configv1.DefaultMonitor()
	cfg.NodeName, cfg.StateDir = "n", t.TempDir()
	up := false
	a := New(cfg, quietLog(), func(context.Context) ([]identity.Listing, error) {
		if !up {
			return nil, errors.New("kubelet not up")
		}
		return nil, nil
	}, nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	a.Identity.Refresh(context.Background())
	if got := status(t, srv.URL+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz before PodResources answered: %d", got)
	}
	if got := status(t, srv.URL+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz: %d", got)
	}
	up = true
	a.Identity.Refresh(context.Background())
	if got := status(t, srv.URL+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz after: %d", got)
	}
}
