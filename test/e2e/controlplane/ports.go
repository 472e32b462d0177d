package controlplane

import (
	"fmt"
	"net"
)

// freePorts reserves n distinct free TCP ports on 127.0.0.1 by listening
// on port 0, then releases them for the components to bind. Another
// process could take one in between; a component that then fails to bind
// says so in its log, which Start's error quotes.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort reserves one free port on 127.0.0.1 (for components started
// beside the control plane, e.g. a scheduler's metrics endpoint).
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
