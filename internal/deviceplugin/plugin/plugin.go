// Package plugin runs one gRPC server per tessera resource and keeps them
// registered with kubelet: it watches kubelet's socket directory and, when
// kubelet restarts (its socket is recreated and ours are wiped), restarts
// the servers and registers again within about a second.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/server"
)

// Plugin supervises the resource servers.
type Plugin struct {
	Dir string
	// Servers are the servers at start; Add brings more while running.
	Servers []*server.Server
	Log     *slog.Logger
	// Retry is the period of registration retries and socket checks.
	Retry time.Duration
	// Registered, if set, receives a value after every successful
	// registration round (tests wait on it).
	Registered chan<- struct{}

	mu    sync.Mutex // guards Servers after Run started
	added chan *server.Server
	// registeredWith is, per server, the kubelet socket it last registered
	// with (Run's goroutine only). Kubelet v1.37 answers a registration of
	// a socket it still holds a stream to with "device plugin already
	// connected" and then drops its clients but not the endpoint, refusing
	// that socket until it restarts; so a server registers once per
	// kubelet socket and once after each restart of the server.
	registeredWith map[*server.Server]os.FileInfo
}

// Add serves a resource that appeared after start (a new MIG profile):
// Run starts its server and registers it with kubelet. Adding a resource
// that is already served does nothing.
func (p *Plugin) Add(s *server.Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, have := range p.Servers {
		if have.Resource() == s.Resource() {
			return
		}
	}
	p.Servers = append(p.Servers, s)
	if p.added == nil {
		p.added = make(chan *server.Server, 64)
	}
	select {
	case p.added <- s:
	default:
		// Run's ticker finds the server's socket missing and starts it.
	}
}

// Server returns the server of res, or nil.
func (p *Plugin) Server(res string) *server.Server {
	for _, s := range p.servers() {
		if s.Resource() == res {
			return s
		}
	}
	return nil
}

func (p *Plugin) servers() []*server.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*server.Server(nil), p.Servers...)
}

func (p *Plugin) addedChan() chan *server.Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.added == nil {
		p.added = make(chan *server.Server, 64)
	}
	return p.added
}

// KubeletSocket is kubelet's registration socket in Dir.
func (p *Plugin) KubeletSocket() string {
	return filepath.Join(p.Dir, filepath.Base(pluginapi.KubeletSocket))
}

// Run serves until ctx ends.
func (p *Plugin) Run(ctx context.Context) error {
	if p.Retry == 0 {
		p.Retry = time.Second
	}
	// kubelet creates the directory, but the plugin may start first.
	if err := os.MkdirAll(p.Dir, 0o750); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	added := p.addedChan()
	for _, s := range p.servers() {
		if err := s.Start(); err != nil {
			p.stopAll()
			return err
		}
	}
	defer p.stopAll()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", p.Dir, err)
	}
	defer w.Close()
	if err := w.Add(p.Dir); err != nil {
		return fmt.Errorf("watch %s: %w", p.Dir, err)
	}
	registered := p.register(ctx)
	tick := time.NewTicker(p.Retry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.Events:
			if ev.Name == p.KubeletSocket() && ev.Has(fsnotify.Create) {
				if registered && p.registeredWithCurrentKubelet() {
					continue // the retry tick got there first
				}
				p.Log.Info("kubelet socket recreated; restarting and re-registering")
				p.restartMissing()
				registered = p.register(ctx)
			} else if ev.Has(fsnotify.Remove) && p.ours(ev.Name) && !exists(ev.Name) {
				// (A socket that is there again was restarted since.)
				registered = false
			}
		case s := <-added:
			if err := s.Start(); err != nil {
				p.Log.Error("start server", "resource", s.Resource(), "err", err)
			}
			if err := p.registerServer(ctx, s); err != nil {
				p.Log.Warn("registration failed; will retry", "resource", s.Resource(), "err", err)
				registered = false
			} else {
				p.Log.Info("registered new resource with kubelet", "resource", s.Resource())
				p.signalRegistered()
			}
		case err := <-w.Errors:
			p.Log.Warn("socket directory watch error", "err", err)
		case <-tick.C:
			if p.socketsMissing() {
				p.Log.Info("plugin socket gone; restarting servers")
				p.restartMissing()
				registered = false
			}
			if !registered {
				registered = p.register(ctx)
			}
		}
	}
}

// register registers every server not yet registered with the current
// kubelet socket.
func (p *Plugin) register(ctx context.Context) bool {
	if !exists(p.KubeletSocket()) {
		return false
	}
	var errs []error
	for _, s := range p.servers() {
		if err := p.registerServer(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		p.Log.Warn("registration failed; will retry", "err", err)
		return false
	}
	p.Log.Info("registered with kubelet", "resources", len(p.servers()))
	p.signalRegistered()
	return true
}

func (p *Plugin) registerServer(ctx context.Context, s *server.Server) error {
	// Stat'ed before registering: a kubelet restarting meanwhile reads
	// as a socket not registered with.
	kubelet, err := os.Stat(p.KubeletSocket())
	if err != nil {
		return err
	}
	if was, ok := p.registeredWith[s]; ok && sameSocket(was, kubelet) {
		return nil
	}
	if err := s.Register(ctx, p.KubeletSocket()); err != nil {
		return err
	}
	if p.registeredWith == nil {
		p.registeredWith = map[*server.Server]os.FileInfo{}
	}
	p.registeredWith[s] = kubelet
	return nil
}

// registeredWithCurrentKubelet reports whether every server registered
// with the kubelet socket that is there now.
func (p *Plugin) registeredWithCurrentKubelet() bool {
	kubelet, err := os.Stat(p.KubeletSocket())
	if err != nil {
		return false
	}
	for _, s := range p.servers() {
		if was, ok := p.registeredWith[s]; !ok || !sameSocket(was, kubelet) {
			return false
		}
	}
	return true
}

// sameSocket tells a socket file from one created later at the same path
// (which may get the same inode number).
func sameSocket(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (p *Plugin) signalRegistered() {
	if p.Registered != nil {
		select {
		case p.Registered <- struct{}{}:
		default:
		}
	}
}

func (p *Plugin) ours(path string) bool {
	for _, s := range p.servers() {
		if s.Socket() == path {
			return true
		}
	}
	return false
}

func (p *Plugin) socketsMissing() bool {
	for _, s := range p.servers() {
		if _, err := os.Stat(s.Socket()); err != nil {
			return true
		}
	}
	return false
}

// restartMissing restarts the servers whose socket is gone (kubelet
// removes them when it starts); they register again.
func (p *Plugin) restartMissing() {
	for _, s := range p.servers() {
		if exists(s.Socket()) {
			continue
		}
		delete(p.registeredWith, s)
		s.Stop()
		if err := s.Start(); err != nil {
			p.Log.Error("restart server", "resource", s.Resource(), "err", err)
		}
	}
}

func (p *Plugin) stopAll() {
	for _, s := range p.servers() {
		s.Stop()
	}
}
