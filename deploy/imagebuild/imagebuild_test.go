package imagebuild

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fixture makes a bin and lib directory like `make build` leaves them: a
// dynamically linked executable (this machine's /bin/true, standing in for
// a cgo binary), a static one, and a shared library for the hook.
func fixture(t *testing.T) (bin, lib string) {
	t.Helper()
	root := t.TempDir()
	bin, lib = filepath.Join(root, "bin"), filepath.Join(root, "lib")
	os.MkdirAll(bin, 0o755)
	os.MkdirAll(lib, 0o755)
	dynamic, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dynamic)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"device-plugin", "vgpu-monitor", "cluster-scheduler"} {
		if err := os.WriteFile(filepath.Join(bin, n), data, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	static := filepath.Join(bin, "hook-installer")
	cmd := exec.Command("go", "build", "-o", static, "./testdata/static")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static fixture: %v\n%s", err, out)
	}
	libc, err := findLibrary("libc.so.6", DefaultLibraryDirs)
	if err != nil {
		t.Fatal(err)
	}
	hook, _ := os.ReadFile(libc)
	if err := os.WriteFile(filepath.Join(lib, "libtessera-hook.so"), hook, 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, lib
}

func digests(t *testing.T, bin, lib string) map[string]v1.Hash {
	t.Helper()
	out := map[string]v1.Hash{}
	for name, spec := range Components(bin, lib) {
		img, err := Build(spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = d
	}
	return out
}

// TestBuildIsReproducible: the same files give the same digests, also after
// their times and modes in the build tree changed; different bytes give a
// different digest.
func TestBuildIsReproducible(t *testing.T) {
	bin, lib := fixture(t)
	first := digests(t, bin, lib)
	old := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{filepath.Join(bin, "device-plugin"), filepath.Join(lib, "libtessera-hook.so")} {
		os.Chtimes(p, old, old)
		os.Chmod(p, 0o755)
	}
	again := digests(t, bin, lib)
	for name, d := range first {
		if again[name] != d {
			t.Errorf("%s: %s then %s from the same bytes", name, d, again[name])
		}
	}
	f, _ := os.OpenFile(filepath.Join(bin, "cluster-scheduler"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0})
	f.Close()
	changed := digests(t, bin, lib)
	if changed["cluster-scheduler"] == first["cluster-scheduler"] {
		t.Error("a changed binary kept its image digest")
	}
	if changed["device-plugin"] != first["device-plugin"] {
		t.Error("an unchanged image changed digest")
	}
}

// layerFiles lists the entries of an image's layers: path → header.
func layerFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
		rc.Close()
	}
	return out
}

// TestImageContents: the binary, its loader and libc (and, for NVML users,
// the libraries libnvidia-ml.so.1 links against) are in the image, owned by
// root, executable, at the epoch; the user, entrypoint and platform are set;
// the static installer brings no libraries.
func TestImageContents(t *testing.T) {
	bin, lib := fixture(t)
	specs := Components(bin, lib)
	img, err := Build(specs["device-plugin"])
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, img)
	for _, want := range []string{"/usr/local/bin/device-plugin", "/usr/local/bin", "/usr"} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s missing", want)
		}
	}
	var libc, loader, libdl bool
	for p, h := range files {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d time %v", p, h.Uid, h.Gid, h.ModTime)
		}
		libc = libc || filepath.Base(p) == "libc.so.6"
		loader = loader || strings.HasPrefix(filepath.Base(p), "ld-linux")
		libdl = libdl || filepath.Base(p) == "libdl.so.2"
	}
	if !libc || !loader || !libdl {
		t.Errorf("runtime libraries: libc %v loader %v libdl %v in %v", libc, loader, libdl, keys(files))
	}
	if h := files["/usr/local/bin/device-plugin"]; h.Mode != 0o755 {
		t.Errorf("binary mode %o", h.Mode)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	if cfg.Config.User != UserRoot || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/device-plugin"}) || cfg.OS != "linux" || !cfg.Created.IsZero() {
		t.Errorf("config %+v", cfg)
	}

	sched, err := Build(specs["cluster-scheduler"])
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := sched.ConfigFile(); cfg.Config.User != UserNonRoot {
		t.Errorf("scheduler runs as %q, want non-root", cfg.Config.User)
	}
	hook, err := Build(specs["hook"])
	if err != nil {
		t.Fatal(err)
	}
	hookFiles := layerFiles(t, hook)
	if _, ok := hookFiles["/libtessera-hook.so"]; !ok {
		t.Errorf("hook image: %v", keys(hookFiles))
	}
	for p := range hookFiles {
		if strings.Contains(p, "libc.so") {
			t.Errorf("hook image carries %s: the static installer needs no C library", p)
		}
	}
}

func keys(m map[string]*tar.Header) []string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	slices.Sort(k)
	return k
}

// TestArchiveIsAnOCILayoutNamedForContainerd writes an archive twice
// (identical bytes), unpacks it and reads it back as an OCI layout: one
// manifest, named for containerd's importer, whose image has the digest
// built.
func TestArchiveIsAnOCILayoutNamedForContainerd(t *testing.T) {
	bin, lib := fixture(t)
	img, err := Build(Components(bin, lib)["cluster-scheduler"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, f := range []string{a, b} {
		if err := WriteArchive(f, "tessera/cluster-scheduler:0.1.0", img); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if string(da) != string(db) {
		t.Fatal("two archives of one image differ")
	}
	unpacked := filepath.Join(dir, "layout")
	if out, err := exec.Command("tar", "-xf", a, "-C", mkdir(t, unpacked)).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	p, err := layout.FromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want ||
		m.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/tessera/cluster-scheduler:0.1.0" ||
		m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.1.0" {
		j, _ := json.Marshal(m)
		t.Fatalf("index %s, want one manifest %s", j, want)
	}
	got, err := p.Image(want)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := got.ConfigFile(); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, d string) string {
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestMissingLibraryIsNamed(t *testing.T) {
	_, err := RuntimeLibraries(nil, []string{"libnot-there.so.9"}, DefaultLibraryDirs)
	if err == nil || !strings.Contains(err.Error(), "libnot-there.so.9") {
		t.Fatalf("err = %v", err)
	}
}

// TestImageRuns unpacks an image built around a dynamically linked program
// (this machine's /bin/true) and runs it chrooted in that root file system:
// the interpreter and libraries the image builder found are enough to start
// it. chroot needs root (CI runs as root; elsewhere the test is skipped).
func TestImageRuns(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("chroot needs root")
	}
	bin, lib := fixture(t)
	img, err := Build(Components(bin, lib)["device-plugin"])
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	layers, _ := img.Layers()
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("tar", "-x", "-C", root)
		cmd.Stdin = rc
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("unpack: %v %s", err, out)
		}
		rc.Close()
	}
	if out, err := exec.Command("chroot", root, "/usr/local/bin/device-plugin").CombinedOutput(); err != nil {
		t.Fatalf("the image's program does not start in its own root: %v %s", err, out)
	}
}

// TestContainerdName: the names containerd's CRI looks images up by, which
// `ctr images import` must give the archives' images (it does not
// normalise an OCI archive's io.containerd.image.name).
func TestContainerdName(t *testing.T) {
	for ref, want := range map[string]string{
		"tessera/hook:0.1.0":              "docker.io/tessera/hook:0.1.0",
		"busybox:1":                       "docker.io/library/busybox:1",
		"docker.io/tessera/hook:0.1.0":    "docker.io/tessera/hook:0.1.0",
		"tessera.local/e2e/probe:v1":      "tessera.local/e2e/probe:v1",
		"localhost:5000/tessera/hook:0.1": "localhost:5000/tessera/hook:0.1",
		"ghcr.io/tessera-gpu/hook:0.1.0":  "ghcr.io/tessera-gpu/hook:0.1.0",
	} {
		got, err := ContainerdName(ref)
		if err != nil || got != want {
			t.Errorf("ContainerdName(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	if _, err := ContainerdName("Bad Name"); err == nil {
		t.Error("an invalid reference is accepted")
	}
}
