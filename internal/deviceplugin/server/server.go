// Package server is the kubelet-facing gRPC side of one tessera resource:
// it serves the DevicePlugin API on a unix socket, registers with kubelet,
// and delegates every decision to the resource manager, the preferred
// allocation chooser and the allocation builder.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/pods"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/preferred"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Deps are what a resource server delegates to.
type Deps struct {
	Manager *resource.Manager
	Chooser *preferred.Chooser
	Builder *allocation.Builder
	Ledger  *ledger.Ledger
	Log     *slog.Logger
	// OnAllocate is called after a successful Allocate (metrics, benchmarks).
	OnAllocate func(resource string, ids []string)
	// Priority resolves a pod's compute priority class (nil: the default
	// table, priority.DefaultTable).
	Priority *priority.Table
}

// Server serves one resource.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer
	deps     Deps
	resource string
	dir      string
	socket   string
	log      *slog.Logger

	life   sync.Mutex // serialises Start and Stop
	mu     sync.Mutex // guards the fields below; handlers read stop
	grpc   *grpc.Server
	stop   chan struct{} // closed by Stop: streams end cleanly
	served chan struct{} // closed when Serve has returned
}

// StopGrace bounds how long Stop waits for RPCs in flight. Streams end as
// soon as Stop closes them; only a stream whose client stopped reading
// (its Send blocked by flow control) or a slow Allocate can take longer,
// and is then cut off.
const StopGrace = 2 * time.Second

// New creates the server of res whose socket lives in kubelet's socket dir.
func New(res, dir string, deps Deps) *Server {
	name := "tessera-" + strings.ReplaceAll(strings.TrimPrefix(res, resource.Domain), "/", "-") + ".sock"
	return &Server{deps: deps, resource: res, dir: dir, socket: filepath.Join(dir, name), log: deps.Log.With("resource", res)}
}

// Resource is the served resource name.
func (s *Server) Resource() string { return s.resource }

// Socket is the server's socket path.
func (s *Server) Socket() string { return s.socket }

// Start listens on the socket, replacing a stale one.
func (s *Server) Start() error {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc != nil {
		return nil
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.socket, err)
	}
	s.grpc = grpc.NewServer()
	s.stop = make(chan struct{})
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	g, served := s.grpc, make(chan struct{})
	s.served = served
	go func() {
		defer close(served)
		if err := g.Serve(ln); err != nil {
			s.log.Error("gRPC server ended", "err", err)
		}
	}()
	return nil
}

// Stop ends every ListAndWatch stream cleanly (the handler returns, so
// kubelet's Recv reads io.EOF rather than a transport error), lets RPCs in
// flight finish for up to StopGrace, closes the socket, and returns once
// the server has stopped serving.
func (s *Server) Stop() {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	g, stop, served := s.grpc, s.stop, s.served
	s.grpc = nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	close(stop)
	stopWithin(g, StopGrace)
	<-served
	_ = os.Remove(s.socket)
}

// stopWithin stops g gracefully (no new RPCs, wait for those in flight),
// and forcibly once grace has passed.
func stopWithin(g *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.GracefulStop()
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.Stop()
		<-done
	}
}

// Register announces the resource to kubelet at kubeletSocket.
func (s *Server) Register(ctx context.Context, kubeletSocket string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet: %w", s.resource, err)
	}
	return nil
}

// GetDevicePluginOptions implements the DevicePlugin API.
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, then a fresh one on every change.
// It returns nil when the server stops, which ends the stream with an OK
// status: the client reads io.EOF.
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	changed, cancel := s.deps.Manager.Watch(s.resource)
	defer cancel()
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: s.deps.Manager.Devices(s.resource)}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stop:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation implements the DevicePlugin API.
func (s *Server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		ids := s.deps.Chooser.Preferred(s.resource, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements the DevicePlugin API. Each container's IDs are
// attributed to the container GetPreferredAllocation chose (or, without a
// preceding call, to the first matching pending container) for the
// realized-allocation ledger; PodResources read-backs correct it. That
// container's tessera.io/gpu request also bounds how many GPUs its
// gpu-mem and gpu-core IDs may lie on.
func (s *Server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		who := sync.OnceValue(func() claimant { return s.claimant(len(cr.DevicesIds)) })
		if err := s.deps.Builder.CheckSpan(s.resource, cr.DevicesIds, func() int { return who().gpus }); err != nil {
			c := who()
			s.log.Error("allocate refused", "ids", len(cr.DevicesIds), "pod", c.ref.Namespace+"/"+c.ref.Pod, "container", c.ref.Container, "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		r, err := s.deps.Builder.ContainerFor(s.resource, cr.DevicesIds, s.scheduling(who))
		if err != nil {
			s.log.Error("allocate refused", "ids", len(cr.DevicesIds), "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		s.record(who(), cr.DevicesIds)
		if s.deps.OnAllocate != nil {
			s.deps.OnAllocate(s.resource, cr.DevicesIds)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// scheduling is the compute policy and priority of a gpu-core allocation's
// pod; other resources, and allocations whose pod is unknown, get
// allocation.Unattributed (the reconciliation corrects them).
func (s *Server) scheduling(who func() claimant) allocation.Scheduling {
	if kind, _ := resource.KindOf(s.resource); kind != resource.KindCore || s.deps.Chooser.Pods == nil {
		return allocation.Unattributed
	}
	c := who()
	if !c.known {
		return allocation.Unattributed
	}
	p := s.deps.Chooser.Pods.Get(c.ref.Namespace, c.ref.Pod)
	if p == nil || string(p.UID) != c.ref.PodUID {
		return allocation.Unattributed
	}
	table := s.deps.Priority
	if table == nil {
		table = priority.DefaultTable()
	}
	sched, err := allocation.SchedulingOf(p, table)
	if err != nil {
		s.log.Warn("compute scheduling of the pod unusable; guaranteed at the lowest priority", "pod", c.ref.Namespace+"/"+c.ref.Pod, "err", err)
	}
	return sched
}

// claimant is the container an Allocate of n IDs is believed to serve.
type claimant struct {
	ref   ledger.ContainerRef
	known bool
	gpus  int // its tessera.io/gpu request; 0 when none or unknown
}

func (s *Server) claimant(n int) claimant {
	ref, ok := s.deps.Ledger.TakeProposal(s.resource, n)
	if ok {
		return claimant{ref: ref, known: true, gpus: s.requestedGPUs(ref)}
	}
	cand := s.deps.Chooser.Candidate(s.resource, n)
	if cand == nil {
		return claimant{}
	}
	return claimant{ref: cand.Ref, known: true, gpus: int(pods.Request(cand.Container, resource.GPU))}
}

// requestedGPUs is the tessera.io/gpu request of ref's container, 0 when
// the pod is no longer known.
func (s *Server) requestedGPUs(ref ledger.ContainerRef) int {
	if s.deps.Chooser.Pods == nil {
		return 0
	}
	p := s.deps.Chooser.Pods.Get(ref.Namespace, ref.Pod)
	if p == nil || string(p.UID) != ref.PodUID {
		return 0
	}
	for _, c := range pods.Containers(p) {
		if c.Name == ref.Container {
			return int(pods.Request(&c, resource.GPU))
		}
	}
	return 0
}

func (s *Server) record(c claimant, ids []string) {
	if !c.known {
		s.log.Info("allocation not attributed to a pod yet; PodResources will tell", "ids", len(ids))
		return
	}
	s.deps.Ledger.Record(c.ref, s.resource, ids)
	s.log.Info("allocated", "pod", c.ref.Namespace+"/"+c.ref.Pod, "container", c.ref.Container, "ids", len(ids))
}

// PreStartContainer implements the DevicePlugin API (not requested).
func (s *Server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
