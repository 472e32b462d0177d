package cluster

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// listeners returns the TCP addresses pid listens on, from /proc/<pid>/fd
// and /proc/<pid>/net/tcp{,6}.
func listeners(pid int) ([]net.IP, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var ips []net.IP
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] { // 0A: LISTEN
				continue
			}
			ip, err := procIP(strings.Split(fields[1], ":")[0])
			if err != nil {
				f.Close()
				return nil, err
			}
			ips = append(ips, ip)
		}
		f.Close()
	}
	return ips, nil
}

// procIP decodes /proc/net/tcp's address: 32-bit words in host (little
// endian) order.
func procIP(s string) (net.IP, error) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil, fmt.Errorf("address %q: %v", s, err)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b), nil
}

// nonLoopbackListeners lists "pid name: address" for every listening
// socket of pids outside 127.0.0.0/8 and ::1.
func nonLoopbackListeners(names map[int]string) ([]string, error) {
	var bad []string
	for pid, name := range names {
		ips, err := listeners(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
		}
		for _, ip := range ips {
			if !ip.IsLoopback() {
				bad = append(bad, name+" ("+strconv.Itoa(pid)+"): "+ip.String())
			}
		}
	}
	return bad, nil
}

func TestProcIPDecodesProcNetTCP(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F":                         "127.0.0.1",
		"00000000":                         "0.0.0.0",
		"00000000000000000000000001000000": "::1",
		"0000000000000000FFFF00000100007F": "127.0.0.1", // ::ffff:127.0.0.1
	} {
		ip, err := procIP(in)
		if err != nil || ip.String() != want {
			t.Errorf("procIP(%s) = %v, %v; want %s", in, ip, err, want)
		}
	}
}

func TestListenersSeeAnOpenSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ips, err := listeners(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ip := range ips {
		found = found || ip.Equal(net.IPv4(127, 0, 0, 1))
	}
	if !found {
		t.Fatalf("listeners(self) = %v, want 127.0.0.1 among them", ips)
	}
}
