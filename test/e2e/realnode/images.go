package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The images of the real node, built locally: no registry is reachable.
// Both hold only the static pause binary; PauseImage is the pod sandbox
// (containerd's pinned sandbox image), TestImage runs test workloads.
const (
	PauseImage = "tessera.local/e2e/pause:v1"
	TestImage  = "tessera.local/e2e/workload:v1"
	// PauseBinary is the path of the program in both images.
	PauseBinary = "/pause"
)

// epoch dates every layer entry, so the same binary gives the same digest.
var epoch = time.Unix(0, 0).UTC()

// buildPause compiles ./pause (this package's directory) statically into dir.
func buildPause(ctx context.Context, dir string) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("pause: cannot locate the realnode package source")
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./pause")
	cmd.Dir = filepath.Dir(self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./pause: %w: %s", err, b)
	}
	return out, nil
}

// singleFileImage is an OCI image of one executable at PauseBinary.
func singleFileImage(binary string, entrypoint []string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: PauseBinary[1:], Size: int64(len(data)), Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		RootFS:       v1.RootFS{Type: "layers"},
		Config:       v1.Config{Entrypoint: entrypoint, WorkingDir: "/"},
	})
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return mutate.AppendLayers(img, layer)
}

// writeImageArchive writes img named ref as an image archive that
// `ctr images import` reads.
func writeImageArchive(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// buildImages builds the pause binary and both images into dir and returns
// the archive paths.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	bin, err := buildPause(ctx, dir)
	if err != nil {
		return nil, err
	}
	var archives []string
	for ref, base := range map[string]string{PauseImage: "pause.tar", TestImage: "workload.tar"} {
		img, err := singleFileImage(bin, []string{PauseBinary})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", ref, err)
		}
		file := filepath.Join(dir, base)
		if err := writeImageArchive(file, ref, img); err != nil {
			return nil, err
		}
		archives = append(archives, file)
	}
	return archives, nil
}
