package realnode

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// layout is where one node keeps everything, under one directory.
type layout struct {
	Dir string
	// NodeIP is the second address on the namespace's loopback interface.
	NodeIP netip.Addr
	// PodCIDR is the bridge network's range (inside the namespace only).
	PodCIDR netip.Prefix
	// CgroupRoot is the kubelet's cgroup root, "/tessera-e2e-<id>".
	CgroupRoot string
	// CNIBinDir holds Debian's containernetworking-plugins.
	CNIBinDir string
	// ShimDir holds containerd-shim-runc-v2 under the name containerd
	// looks for on PATH.
	ShimDir string
	// Runc is Debian's runc.
	Runc string
	// KubeletPort and KubeletHealthzPort are the kubelet's ports.
	KubeletPort, KubeletHealthzPort int
}

func (l layout) ContainerdSocket() string { return l.Dir + "/containerd/containerd.sock" }
func (l layout) ContainerdRoot() string   { return l.Dir + "/containerd/root" }
func (l layout) ContainerdState() string  { return l.Dir + "/containerd/state" }
func (l layout) CDIDir() string           { return l.Dir + "/cdi" }
func (l layout) CNIConfDir() string       { return l.Dir + "/cni/net.d" }
func (l layout) KubeletRoot() string      { return l.Dir + "/kubelet" }
func (l layout) KubeletConfig() string    { return l.Dir + "/kubelet.yaml" }
func (l layout) ContainerdConfig() string { return l.Dir + "/containerd.toml" }

// containerdConfig is containerd v2's configuration (version 3): every path
// under Dir, CRI with the locally built sandbox image, runc from Debian,
// CDI specs from CDIDir (CDI is always on in containerd v2; enable_cdi is
// accepted and ignored there).
func (l layout) containerdConfig() string {
	q := strconv.Quote
	return strings.Join([]string{
		`version = 3`,
		`root = ` + q(l.ContainerdRoot()),
		`state = ` + q(l.ContainerdState()),
		`[grpc]`,
		`  address = ` + q(l.ContainerdSocket()),
		`[ttrpc]`,
		`  address = ` + q(l.ContainerdSocket()+".ttrpc"),
		`[debug]`,
		`  address = ""`,
		`[metrics]`,
		`  address = ""`,
		`[plugins.'io.containerd.internal.v1.opt']`,
		`  path = ` + q(l.Dir+"/containerd/opt"),
		`[plugins.'io.containerd.nri.v1.nri']`,
		`  disable = true`,
		`[plugins.'io.containerd.grpc.v1.cri']`,
		`  disable_tcp_service = true`,
		`  stream_server_address = "127.0.0.1"`,
		`  stream_server_port = "0"`,
		`[plugins.'io.containerd.cri.v1.images']`,
		`  [plugins.'io.containerd.cri.v1.images'.pinned_images]`,
		`    sandbox = ` + q(PauseImage),
		`[plugins.'io.containerd.cri.v1.runtime']`,
		// The machine lacks CAP_SYS_RESOURCE: runc cannot lower a
		// container's oom_score_adj below containerd's own (kubelet asks -998).
		`  restrict_oom_score_adj = true`,
		`  enable_cdi = true`,
		`  cdi_spec_dirs = [` + q(l.CDIDir()) + `]`,
		// Pod network namespaces under the state directory, not /run/netns.
		`  netns_mounts_under_state_dir = true`,
		`  [plugins.'io.containerd.cri.v1.runtime'.cni]`,
		`    bin_dirs = [` + q(l.CNIBinDir) + `]`,
		`    conf_dir = ` + q(l.CNIConfDir()),
		`  [plugins.'io.containerd.cri.v1.runtime'.containerd]`,
		`    default_runtime_name = "runc"`,
		`    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]`,
		`        BinaryName = ` + q(l.Runc),
		`        SystemdCgroup = false`,
		``,
	}, "\n")
}

// kubeletConfig is the KubeletConfiguration. The facts of this machine:
// cgroup v1 (failCgroupV1: false), swap on (failSwapOn: false), no systemd
// in charge of cgroups (cgroupfs). Everything it creates in cgroups lives
// under CgroupRoot. Anonymous access with AlwaysAllow: the kubelet's port is
// reachable only inside the node's network namespace, and the API server
// has no kubelet client certificate.
func (l layout) kubeletConfig(kubeconfigCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
  x509:
    clientCAFile: %[4]q
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: %[5]q
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[6]s
podLogsDir: %[8]q
resolvConf: ""
clusterDomain: cluster.local
registerNode: true
rotateCertificates: false
serverTLSBootstrap: false
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
nodeStatusReportFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
localStorageCapacityIsolation: false
protectKernelDefaults: false
enforceNodeAllocatable: ["pods"]
podCIDR: %[7]q
`, l.NodeIP, l.KubeletPort, l.KubeletHealthzPort, kubeconfigCA, l.CgroupRoot, l.ContainerdSocket(), l.PodCIDR, l.Dir+"/pod-logs")
}

// bridgeConflist is the pods' network: a bridge inside the namespace with
// addresses from PodCIDR (containerd adds the loopback interface itself).
func (l layout) bridgeConflist() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "tessera-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni-tessera0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, l.PodCIDR, l.Dir+"/cni/ipam")
}
