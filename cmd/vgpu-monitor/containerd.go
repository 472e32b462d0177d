package main

import (
	"errors"
	"log/slog"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/monitor/containerd"
)

// containerdResolver connects to containerd when the node runs it. Off (nil)
// when the socket is unset or absent: identity then comes from cgroup paths.
func containerdResolver(log *slog.Logger, cfg configv1.ContainerdConfig) (*containerd.Resolver, func()) {
	if cfg.Socket == "" {
		log.Info("containerd lookup off (containerd.socket is empty): processes are placed by their cgroup paths only")
		return nil, func() {}
	}
	c, err := containerd.Dial(cfg.Socket, cfg.Namespace)
	if errors.Is(err, containerd.ErrNoSocket) {
		log.Info("containerd socket absent (another runtime?): processes are placed by their cgroup paths only", "socket", cfg.Socket)
		return nil, func() {}
	}
	if err != nil {
		log.Warn("containerd unavailable: processes are placed by their cgroup paths only", "socket", cfg.Socket, "err", err)
		return nil, func() {}
	}
	log.Info("containerd lookup on: processes are named by containerd's task PIDs and CRI labels", "socket", cfg.Socket, "namespace", cfg.Namespace)
	return &containerd.Resolver{Lister: c}, func() { c.Close() }
}
