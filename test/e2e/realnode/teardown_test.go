package realnode

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func TestParseMountsUnder(t *testing.T) {
	info := strings.Join([]string{
		`22 1 0:21 / / rw shared:1 - ext4 /dev/sda1 rw`,
		`100 22 0:50 / /tmp/node rw shared:2 - ext4 /dev/sda1 rw`,
		`101 100 0:51 / /tmp/node/kubelet rw shared:3 - ext4 /dev/sda1 rw`,
		`102 100 0:52 / /tmp/node/state/a\040b rw - tmpfs shm rw`,
		`103 22 0:53 / /tmp/nodeX rw - tmpfs x rw`,
		`104 101 0:54 / /tmp/node/kubelet rw - tmpfs y rw`,
	}, "\n")
	got := parseMountsUnder(info, "/tmp/node/")
	want := []string{"/tmp/node/kubelet", "/tmp/node/state/a b", "/tmp/node/kubelet", "/tmp/node"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mounts under /tmp/node: got %q, want %q (last mounted first, /tmp/nodeX not included, \\040 unescaped)", got, want)
	}
}

func TestRandomNodeIPIsPrivateAndNotLoopback(t *testing.T) {
	for range 200 {
		ip, err := randomNodeIP()
		if err != nil {
			t.Fatal(err)
		}
		if !ip.IsPrivate() || ip.IsLoopback() || !netip.MustParsePrefix("10.200.0.0/13").Contains(ip) {
			t.Fatalf("node IP %s: want 10.200.0.0/13", ip)
		}
		if b := ip.As4(); b[3] == 0 || b[3] == 255 {
			t.Fatalf("node IP %s ends in a network or broadcast octet", ip)
		}
	}
}

func TestConfigsNameEveryPathUnderDir(t *testing.T) {
	l := layout{Dir: "/tmp/n", NodeIP: netip.MustParseAddr("10.201.2.3"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24"),
		CgroupRoot: "/tessera-e2e-ab", CNIBinDir: "/usr/lib/cni", Runc: "/usr/sbin/runc", KubeletPort: 1234, KubeletHealthzPort: 1235}
	c := l.containerdConfig()
	for _, want := range []string{`root = "/tmp/n/containerd/root"`, `state = "/tmp/n/containerd/state"`,
		`address = "/tmp/n/containerd/containerd.sock"`, `restrict_oom_score_adj = true`, `cdi_spec_dirs = ["/tmp/n/cdi"]`,
		`sandbox = "` + PauseImage + `"`, `BinaryName = "/usr/sbin/runc"`, `netns_mounts_under_state_dir = true`} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, c)
		}
	}
	k := l.kubeletConfig("/ca.crt")
	for _, want := range []string{"address: 10.201.2.3", "port: 1234", "failCgroupV1: false", "failSwapOn: false",
		"cgroupDriver: cgroupfs", `cgroupRoot: "/tessera-e2e-ab"`, "containerRuntimeEndpoint: unix:///tmp/n/containerd/containerd.sock", `nodefs.available: "1%"`, `podLogsDir: "/tmp/n/pod-logs"`} {
		if !strings.Contains(k, want) {
			t.Errorf("kubelet config lacks %s:\n%s", want, k)
		}
	}
	if b := l.bridgeConflist(); !strings.Contains(b, `"subnet": "10.244.2.0/24"`) {
		t.Errorf("bridge conflist lacks the pod range:\n%s", b)
	}
}

// TestKubeletConfigDecodesStrictly: the kubelet refuses unknown fields in
// its configuration file; decode ours strictly into the real type.
func TestKubeletConfigDecodesStrictly(t *testing.T) {
	l := layout{Dir: "/tmp/n", NodeIP: netip.MustParseAddr("10.201.2.3"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24"),
		CgroupRoot: "/tessera-e2e-ab", KubeletPort: 1234, KubeletHealthzPort: 1235}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(l.kubeletConfig("/ca.crt")), &cfg); err != nil {
		t.Fatalf("kubelet config: %v", err)
	}
	if cfg.FailCgroupV1 == nil || *cfg.FailCgroupV1 || cfg.FailSwapOn == nil || *cfg.FailSwapOn || cfg.CgroupDriver != "cgroupfs" || cfg.Address != "10.201.2.3" {
		t.Errorf("decoded kubelet config lost a setting: %+v", cfg)
	}
}
