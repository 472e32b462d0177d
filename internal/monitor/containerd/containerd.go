// Package containerd names the Kubernetes container a host process runs in, as
// containerd knows it: the tasks service lists each container's PIDs (host pid
// namespace, the monitor's), and the CRI plugin labels each container with its
// pod's namespace and name and the container's name. The enforcer uses it to
// put a process that bypasses the hook on its pod (log line, Event) and to
// know that a process is a Kubernetes container's before killing it.
//
// Other runtimes (CRI-O) have no such API here: /proc/<pid>/cgroup paths
// (hostproc, enforce.InPod) remain the fallback.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// The labels the CRI plugin copies from kubelet's container config.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// Container is a Kubernetes container as containerd knows it.
type Container struct {
	ID     string // containerd's container ID (the CRI container ID)
	PodUID string
	identity.Owner
}

// Lister is what the resolver needs of containerd: its containers (ID and
// labels) and the PIDs of each one's task. Client is the real one.
type Lister interface {
	Containers(ctx context.Context) ([]Labelled, error)
	Pids(ctx context.Context, id string) ([]uint32, error)
}

// Labelled is a containerd container's ID and labels.
type Labelled struct {
	ID     string
	Labels map[string]string
}

// Resolver maps host PIDs to containers. The mapping is refreshed on demand:
// when it is older than MaxAge, or when a PID is unknown and the last
// refresh is older than MinAge (a process started since). No goroutine.
type Resolver struct {
	Lister Lister
	MaxAge time.Duration // default 10 s
	MinAge time.Duration // default 1 s

	mu    sync.Mutex
	byPID map[uint32]Container
	at    time.Time
	err   error
	now   func() time.Time // time.Now; tests step it
}

// Lookup returns the container of a host PID.
func (r *Resolver) Lookup(ctx context.Context, pid uint32) (Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	age := r.clock()().Sub(r.at)
	c, ok := r.byPID[pid]
	if age > r.maxAge() || (!ok && age > r.minAge()) {
		if err := r.refreshLocked(ctx); err == nil {
			c, ok = r.byPID[pid]
		}
	}
	return c, ok
}

// Err is the error of the last refresh (nil after a good one).
func (r *Resolver) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Refresh reads containerd once. On error the previous mapping is kept.
func (r *Resolver) Refresh(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refreshLocked(ctx)
}

func (r *Resolver) refreshLocked(ctx context.Context) error {
	r.at = r.clock()() // also after a failure: a down containerd is asked once per MinAge, not per lookup
	m, err := read(ctx, r.Lister)
	r.err = err
	if err != nil {
		return err
	}
	r.byPID = m
	return nil
}

// read builds the PID map. A container without a task (created, not
// started, or exited) has no PIDs; one without the CRI labels (the pod
// sandbox's pause container has no container name, or a container made
// with ctr) names no Kubernetes container and is left out.
func read(ctx context.Context, l Lister) (map[uint32]Container, error) {
	list, err := l.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("containerd containers: %w", err)
	}
	out := map[uint32]Container{}
	for _, c := range list {
		k, ok := kubernetes(c)
		if !ok {
			continue
		}
		pids, err := l.Pids(ctx, c.ID)
		if errdefs.IsNotFound(err) {
			continue // no task: nothing runs in it
		}
		if err != nil {
			return nil, fmt.Errorf("containerd task %s: %w", c.ID, err)
		}
		for _, pid := range pids {
			out[pid] = k
		}
	}
	return out, nil
}

func kubernetes(c Labelled) (Container, bool) {
	k := Container{ID: c.ID, PodUID: c.Labels[LabelPodUID], Owner: identity.Owner{
		Namespace: c.Labels[LabelPodNamespace], Pod: c.Labels[LabelPodName], Container: c.Labels[LabelContainerName]}}
	return k, k.Namespace != "" && k.Pod != "" && k.Container != ""
}

func (r *Resolver) maxAge() time.Duration {
	if r.MaxAge > 0 {
		return r.MaxAge
	}
	return 10 * time.Second
}

func (r *Resolver) clock() func() time.Time {
	if r.now != nil {
		return r.now
	}
	return time.Now
}

func (r *Resolver) minAge() time.Duration {
	if r.MinAge > 0 {
		return r.MinAge
	}
	return time.Second
}

// Client is a Lister over containerd's gRPC API (the containers and tasks
// services of github.com/containerd/containerd/api, which containerd's own
// client wraps), in one namespace. The full client package
// (containerd/v2/client) also links images, content, snapshots, transfer
// and tracing: 8 MiB more resident memory in every node agent for two calls.
type Client struct {
	conn       *grpc.ClientConn
	namespace  string
	containers containersapi.ContainersClient
	tasks      tasksapi.TasksClient
}

// ErrNoSocket: containerd's socket is not there (another runtime).
var ErrNoSocket = errors.New("containerd socket absent")

// Dial connects to containerd's socket in namespace (kubelet's: "k8s.io").
// The connection is made lazily by gRPC; a socket that does not exist is
// ErrNoSocket at once.
func Dial(socket, namespace string) (*Client, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("%s: %w (%v)", socket, ErrNoSocket, err)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("containerd %s: %w", socket, err)
	}
	return &Client{conn: conn, namespace: namespace,
		containers: containersapi.NewContainersClient(conn), tasks: tasksapi.NewTasksClient(conn)}, nil
}

// call bounds a request and names the namespace, as containerd's client does.
func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	return namespaces.WithNamespace(ctx, c.namespace), cancel
}

// Containers lists the namespace's containers with their labels.
func (c *Client) Containers(ctx context.Context) ([]Labelled, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.containers.List(ctx, &containersapi.ListContainersRequest{})
	if err != nil {
		return nil, errgrpc.ToNative(err)
	}
	out := make([]Labelled, 0, len(resp.Containers))
	for _, ct := range resp.Containers {
		out = append(out, Labelled{ID: ct.ID, Labels: ct.Labels})
	}
	return out, nil
}

// Pids lists the host PIDs of a container's task (its init and every
// process in it, as the shim reports them).
func (c *Client) Pids(ctx context.Context, id string) ([]uint32, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.ListPids(ctx, &tasksapi.ListPidsRequest{ContainerID: id})
	if err != nil {
		return nil, errgrpc.ToNative(err)
	}
	pids := make([]uint32, 0, len(resp.Processes))
	for _, p := range resp.Processes {
		pids = append(pids, p.Pid)
	}
	return pids, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
