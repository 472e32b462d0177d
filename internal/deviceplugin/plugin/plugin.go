// Package plugin runs one gRPC server per tessera resource and keeps them
// registered with kubelet: it watches kubelet's socket directory and, when
// kubelet restarts (its socket is recreated and ours are wiped), restarts
// the servers whose socket is gone and registers again within about a
// second.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
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
	// resource → the kubelet instance it is registered with. Kubelet
	// v1.37 refuses a second registration of a socket it is connected to
	// ("device plugin already connected"), so only servers that are new
	// to the current kubelet register.
	regs := map[string]kubeletInstance{}
	refresh := func() {
		for _, s := range p.restartMissing() {
			delete(regs, s.Resource())
		}
		p.registerNew(ctx, regs)
	}
	refresh()
	tick := time.NewTicker(p.Retry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.Events:
			if ev.Name == p.KubeletSocket() && ev.Has(fsnotify.Create) {
				p.Log.Info("kubelet socket recreated; registering again")
				refresh()
			}
		case s := <-added:
			if err := s.Start(); err != nil {
				p.Log.Error("start server", "resource", s.Resource(), "err", err)
			}
			refresh()
		case err := <-w.Errors:
			p.Log.Warn("socket directory watch error", "err", err)
		case <-tick.C:
			refresh()
		}
	}
}

// kubeletInstance tells one kubelet from the next: its registration
// socket's inode and creation time (a restarted kubelet creates a new
// socket, whose inode number may be reused).
type kubeletInstance struct {
	ino     uint64
	created int64
}

func (p *Plugin) kubelet() (kubeletInstance, bool) {
	st, err := os.Stat(p.KubeletSocket())
	if err != nil {
		return kubeletInstance{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return kubeletInstance{created: st.ModTime().UnixNano()}, true
	}
	return kubeletInstance{ino: sys.Ino, created: st.ModTime().UnixNano()}, true
}

// registerNew registers the servers the current kubelet does not know
// (all of them after a kubelet restart, a restarted or added server
// otherwise) and records them in regs.
func (p *Plugin) registerNew(ctx context.Context, regs map[string]kubeletInstance) {
	k, ok := p.kubelet()
	if !ok {
		return
	}
	var done []string
	var errs []error
	for _, s := range p.servers() {
		if have, ok := regs[s.Resource()]; ok && have == k {
			continue
		}
		if err := s.Register(ctx, p.KubeletSocket()); err != nil {
			errs = append(errs, err)
			continue
		}
		regs[s.Resource()] = k
		done = append(done, s.Resource())
	}
	if err := errors.Join(errs...); err != nil {
		p.Log.Warn("registration failed; will retry", "err", err)
	}
	if len(done) > 0 {
		p.Log.Info("registered with kubelet", "resources", done)
		if len(errs) == 0 {
			p.signalRegistered()
		}
	}
}

func (p *Plugin) signalRegistered() {
	if p.Registered != nil {
		select {
		case p.Registered <- struct{}{}:
		default:
		}
	}
}

// restartMissing restarts the servers whose socket is gone (kubelet wipes
// its socket directory when it starts) and returns them. Servers whose
// socket is there keep serving: restarting them would only end their
// streams, and a kubelet that connects meanwhile would find no socket.
func (p *Plugin) restartMissing() []*server.Server {
	var restarted []*server.Server
	for _, s := range p.servers() {
		if _, err := os.Stat(s.Socket()); err == nil {
			continue
		}
		p.Log.Info("plugin socket gone; restarting its server", "resource", s.Resource())
		s.Stop()
		if err := s.Start(); err != nil {
			p.Log.Error("restart server", "resource", s.Resource(), "err", err)
			continue
		}
		restarted = append(restarted, s)
	}
	return restarted
}

func (p *Plugin) stopAll() {
	for _, s := range p.servers() {
		s.Stop()
	}
}
