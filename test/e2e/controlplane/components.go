package controlplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=e2e=" + peer,
		"--log-level=warn",
		// A throwaway cluster: durability is worth nothing, and fsync on a
		// shared disk would make the benchmarks measure the disk.
		"--unsafe-no-fsync",
	}
	return cp.startComponent(ctx, binaries.Etcd, args, func(ctx context.Context) error {
		body, err := get(ctx, client+"/health")
		if err != nil {
			return err
		}
		var h struct {
			Health string `json:"health"`
		}
		if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
			return fmt.Errorf("etcd /health: %s", body)
		}
		return nil
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdPort, port int) error {
	f := cp.PKI.Files
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--tls-cert-file=" + f.ServingCert,
		"--tls-private-key-file=" + f.ServingKey,
		"--client-ca-file=" + f.CACert,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f.ServiceAccountPub,
		"--service-account-signing-key-file=" + f.ServiceAccountKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// The kubernetes Service's endpoint would be 127.0.0.1, which
		// Endpoints validation refuses (loopback); nothing here needs it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	args = append(args, cp.opts.APIServerArgs...)
	return cp.startComponent(ctx, binaries.KubeAPIServer, args, func(ctx context.Context) error {
		if cp.client == nil {
			cfg, err := cp.RESTConfig(1000, 1000)
			if err != nil {
				return err
			}
			if cp.client, err = kubernetes.NewForConfig(cfg); err != nil {
				return fmt.Errorf("admin client: %w", err)
			}
		}
		body, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("/readyz: %w: %s", err, body)
		}
		return nil
	})
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, port int) error {
	f := cp.PKI.Files
	args := []string{
		"--kubeconfig=" + cp.AdminKubeconfig,
		"--authentication-kubeconfig=" + cp.AdminKubeconfig,
		"--authorization-kubeconfig=" + cp.AdminKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--leader-elect=false",
		"--service-account-private-key-file=" + f.ServiceAccountKey,
		"--root-ca-file=" + f.CACert,
		"--cluster-signing-cert-file=" + f.CACert,
		"--cluster-signing-key-file=" + f.CAKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--use-service-account-credentials=false",
		// Its default 20 requests/s lift the not-ready taint of 1,000 new
		// nodes in a minute or more; kwokctl lifts the limit the same way.
		"--kube-api-qps=1000",
		"--kube-api-burst=1000",
		"--profiling=false",
	}
	args = append(args, cp.opts.ControllerManagerArgs...)
	healthz := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	return cp.startComponent(ctx, binaries.KubeControllerManager, args, func(ctx context.Context) error {
		if _, err := get(ctx, healthz); err != nil {
			return err
		}
		// The ServiceAccount admission plugin refuses pods in a namespace
		// until the controller manager has made its default ServiceAccount.
		_, err := cp.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no default ServiceAccount yet")
		}
		return err
	})
}

// KubeSchedulerOptions configure StartKubeScheduler.
type KubeSchedulerOptions struct {
	// QPS and Burst limit the scheduler's API client (clientConnection in
	// KubeSchedulerConfiguration); 0 keeps kube-scheduler's defaults (50, 100).
	QPS   float32
	Burst int32
	// Args are appended to the flags.
	Args []string
}

// StartKubeScheduler starts kube-scheduler v1.37.2 (the default-scheduler)
// and waits until it is ready.
func (cp *ControlPlane) StartKubeScheduler(ctx context.Context, opts KubeSchedulerOptions) (*process.Process, error) {
	path, err := binaries.KubeScheduler.Path()
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	cp.bins[binaries.KubeScheduler] = path
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	conn := fmt.Sprintf("  kubeconfig: %q\n", cp.AdminKubeconfig)
	if opts.QPS > 0 {
		conn += fmt.Sprintf("  qps: %g\n  burst: %d\n", opts.QPS, opts.Burst)
	}
	cfg := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"clientConnection:\n" + conn + "leaderElection:\n  leaderElect: false\n"
	cfgPath := filepath.Join(cp.Dir, "kube-scheduler.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("kube-scheduler config: %w", err)
	}
	args := append([]string{
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + cp.AdminKubeconfig,
		"--authorization-kubeconfig=" + cp.AdminKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
	}, opts.Args...)
	readyz := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	if err := cp.startComponent(ctx, binaries.KubeScheduler, args, func(ctx context.Context) error {
		_, err := get(ctx, readyz)
		return err
	}); err != nil {
		return nil, err
	}
	procs := cp.Processes()
	return procs[len(procs)-1], nil
}

// healthClient reads health endpoints: plain HTTP (etcd, kwok), or HTTPS
// with the certificate the controller manager and schedulers made for
// themselves (nothing to verify it against; loopback only).
var healthClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// WaitHealthy waits until url answers 200 OK, failing early if p exits;
// bounded by ctx and two minutes. For components started beside the
// control plane (kwok, a scheduler).
func WaitHealthy(ctx context.Context, p *process.Process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return p.WaitReady(ctx, func(ctx context.Context) error {
		_, err := get(ctx, url)
		return err
	})
}

// get returns the body of a 200 response.
func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return body, nil
}
