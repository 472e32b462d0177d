package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// openStreams opens one ListAndWatch stream per resource, as kubelet does,
// and reads each stream's first message.
func (e *env) openStreams(ctx context.Context) map[string]pluginapi.DevicePlugin_ListAndWatchClient {
	e.t.Helper()
	streams := map[string]pluginapi.DevicePlugin_ListAndWatchClient{}
	for _, res := range e.d.Manager.Resources() {
		stream, err := e.client_(res).ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			e.t.Fatal(err)
		}
		streams[res] = stream
	}
	return streams
}

// TestShutdownEndsListAndWatchCleanly: on SIGTERM (the daemon's context
// ends) every ListAndWatch stream ends with an OK status before the
// server goes away, so kubelet's Recv reads io.EOF, not a transport error
// ("rpc error: code = Unavailable").
func TestShutdownEndsListAndWatchCleanly(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	streams := e.openStreams(ctx)
	e.stop()
	for res, stream := range streams {
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: Recv after shutdown = %v, want io.EOF", res, err)
		}
	}
}

// TestKubeletRestartEndsStreamsCleanly: a restarting kubelet wipes the
// plugin sockets; the plugin restarts those servers, and streams still
// open on them end cleanly too.
func TestKubeletRestartEndsStreamsCleanly(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	streams := e.openStreams(ctx)
	e.kubelet.srv.Stop()
	dir := e.d.Config.KubeletSocketDir
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		os.Remove(filepath.Join(dir, en.Name()))
	}
	e.kubelet = startKubelet(t, dir)
	e.kubelet.awaitRegistrations(t, len(streams))
	for res, stream := range streams {
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: Recv after the restart = %v, want io.EOF", res, err)
		}
	}
}
