package imagebuild

import "path/filepath"

// Users of the images. The device plugin runs as root: kubelet's
// device-plugin directory and PodResources socket belong to root. The node
// monitor runs as root: it reads the PodResources socket, writes region
// slots of the plugin's files, and (policy kill) signals other users'
// processes, in the host pid namespace. The hook image's installer writes
// into a root-owned host directory. The scheduler only talks to the API
// server, so it runs as an unprivileged user.
const (
	UserRoot    = "0:0"
	UserNonRoot = "65532:65532"
)

// nvmlLibraries are what NVIDIA's libnvidia-ml.so.1 (loaded with dlopen by
// go-nvml, injected by the NVIDIA runtime or CDI) links against besides
// libc: since glibc 2.34 these are stubs, but the loader still needs them.
var nvmlLibraries = []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"}

// Components are tessera's images, keyed by component name (the image is
// <repository>/<component>:<tag>), built from `make build`'s outputs: the
// binaries in binDir (bin/) and the hook in libDir (lib/).
func Components(binDir, libDir string) map[string]Spec {
	bin := func(name string) File {
		return File{Source: filepath.Join(binDir, name), Path: "/usr/local/bin/" + name, Mode: 0o755}
	}
	labels := func(title string) map[string]string {
		return map[string]string{"org.opencontainers.image.title": title, "org.opencontainers.image.source": "https://github.com/tessera-gpu/tessera"}
	}
	return map[string]Spec{
		"device-plugin": {
			Files:     []File{bin("device-plugin")},
			RuntimeOf: []string{"/usr/local/bin/device-plugin"}, ExtraLibraries: nvmlLibraries,
			Entrypoint: []string{"/usr/local/bin/device-plugin"}, User: UserRoot,
			Labels: labels("tessera device plugin"),
		},
		"vgpu-monitor": {
			Files:     []File{bin("vgpu-monitor")},
			RuntimeOf: []string{"/usr/local/bin/vgpu-monitor"}, ExtraLibraries: nvmlLibraries,
			Entrypoint: []string{"/usr/local/bin/vgpu-monitor"}, User: UserRoot,
			Labels: labels("tessera node monitor"),
		},
		"cluster-scheduler": {
			Files:      []File{bin("cluster-scheduler")},
			RuntimeOf:  []string{"/usr/local/bin/cluster-scheduler"},
			Entrypoint: []string{"/usr/local/bin/cluster-scheduler"}, User: UserNonRoot,
			Labels: labels("tessera cluster scheduler"),
		},
		"hook": {
			// The library is copied to the host, never run here: it needs
			// no runtime of its own in this image. The installer is static.
			Files:      []File{bin("hook-installer"), {Source: filepath.Join(libDir, "libtessera-hook.so"), Path: "/libtessera-hook.so", Mode: 0o755}},
			RuntimeOf:  []string{"/usr/local/bin/hook-installer"},
			Entrypoint: []string{"/usr/local/bin/hook-installer"}, User: UserRoot,
			Labels: labels("tessera CUDA hook and its installer"),
		},
	}
}
