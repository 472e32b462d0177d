package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// settledGoroutines waits until the goroutine count stops falling and
// is at most want, returning the last count.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// TestNoGoroutineLeaks: kubelet restarts (every plugin socket wiped,
// every stream cut, registration again, fresh ListAndWatch streams) leave
// the plugin with as many goroutines as before, and when its context ends
// Run returns only after every goroutine it started has ended (so NVML
// can be shut down after it).
func TestNoGoroutineLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	e := newEnv(t, gputest.DGXH100)
	// A real NVML event wait lasts up to a second: the health watcher is
	// almost always inside one when the context ends. Run must not return
	// before it is out (the caller shuts NVML down next).
	var inWait atomic.Int32
	create := e.node.EventSetCreateFunc
	e.node.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		es, ret := create()
		m := es.(*mock.EventSet)
		m.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
			inWait.Add(1)
			defer inWait.Add(-1)
			time.Sleep(200 * time.Millisecond)
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		return m, ret
	}
	e.start()
	dir := e.d.Config.KubeletSocketDir
	// streams opens one ListAndWatch stream per resource, as kubelet does
	// after each registration; the returned func closes them.
	streams := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		var conns []*grpc.ClientConn
		for _, res := range e.d.Manager.Resources() {
			// The test deletes the socket directory from one listing, as
			// kubelet does; a server the plugin's 1 s check restarted in
			// the middle can lose its new socket that way and is started
			// again at the next check.
			sock := e.d.Plugin.Server(res).Socket()
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(sock); err == nil {
					break
				}
			}
			conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
			s, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		return func() {
			cancel()
			for _, c := range conns {
				c.Close()
			}
		}
	}
	cancel := streams()
	time.Sleep(100 * time.Millisecond)
	running := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		e.kubelet.srv.Stop()
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			os.Remove(filepath.Join(dir, en.Name()))
		}
		e.kubelet = startKubelet(t, dir)
		e.kubelet.awaitRegistrations(t, 3)
		cancel()
		cancel = streams()
	}
	if n := settledGoroutines(running + 2); n > running+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines grew from %d to %d over 5 kubelet restarts:\n%s", running, n, buf[:runtime.Stack(buf, true)])
	}
	cancel()
	e.kubelet.srv.Stop()
	settledGoroutines(running - 6) // the test's and kubelet's connections end
	e.cancel()
	<-e.done
	e.cancel = nil
	if inWait.Load() != 0 {
		t.Fatal("Run returned while the health watcher was inside NVML's event wait")
	}
	// Run has returned: nothing it started may still run.
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before start, %d after Run returned:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
