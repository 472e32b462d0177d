package realnode

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
)

// netnsDir is where `ip netns add` pins named namespaces.
const netnsDir = "/run/netns"

// namespace is a network namespace made for one node: its loopback is up
// and carries NodeIP as a second address. Nothing is added to the host's
// interfaces.
type namespace struct {
	Name   string
	NodeIP netip.Addr
}

// Path is the pinned namespace, for nsenter --net=.
func (n namespace) Path() string { return netnsDir + "/" + n.Name }

// randomID is 8 hex digits, naming the namespace, directory and cgroups of
// one run.
func randomID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// randomNodeIP picks an address in 10.200.0.0/13 .. 10.207.255.254 (a /32
// on the namespace's loopback; kubelet refuses a 127/8 node IP).
func randomNodeIP() (netip.Addr, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return netip.Addr{}, err
	}
	v := binary.BigEndian.Uint32(b)
	a := [4]byte{10, 200 + byte(v>>24)%8, byte(v >> 16), 1 + byte(v)%254}
	return netip.AddrFrom4(a), nil
}

// createNamespace adds the namespace, brings its loopback up and adds the
// node address to it; a failure deletes what was made.
func createNamespace(id string) (n namespace, err error) {
	n.Name = "tessera-e2e-" + id
	if n.NodeIP, err = randomNodeIP(); err != nil {
		return n, err
	}
	if err := ip("netns", "add", n.Name); err != nil {
		return n, err
	}
	defer func() {
		if err != nil {
			_ = deleteNamespace(n.Name)
		}
	}()
	if err := ip("-n", n.Name, "link", "set", "lo", "up"); err != nil {
		return n, err
	}
	if err := ip("-n", n.Name, "addr", "add", n.NodeIP.String()+"/32", "dev", "lo"); err != nil {
		return n, err
	}
	return n, nil
}

// deleteNamespace removes the pinned namespace and checks it is gone.
func deleteNamespace(name string) error {
	if err := ip("netns", "delete", name); err != nil {
		return err
	}
	if _, err := os.Stat(netnsDir + "/" + name); err == nil {
		return fmt.Errorf("network namespace %s still pinned after ip netns delete", name)
	}
	return nil
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
