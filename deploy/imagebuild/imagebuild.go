// Package imagebuild builds tessera's container images without a container
// engine, with go-containerregistry: each image is layers made from files
// already built on this machine (the binaries, the hook library and the
// shared libraries a dynamically linked binary needs), plus an OCI config,
// written as an OCI image layout archive that `ctr images import` and
// `docker load` read.
//
// Reproducible: the same input bytes give the same digests. Layer entries
// are sorted, owned by 0:0, dated at the Unix epoch, with modes set here
// rather than taken from the build tree; the config has no creation time.
//
// It lives in its own module (deploy/) so that go-containerregistry's
// dependency graph (docker/cli, moby, OpenTelemetry) stays out of the
// product module.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every layer entry's time: file times of the build tree must not
// change a digest.
var epoch = time.Unix(0, 0).UTC()

// File is one file of an image.
type File struct {
	// Source is the file on this machine.
	Source string
	// Path is the absolute path in the image.
	Path string
	// Mode is the file's permission bits in the image.
	Mode fs.FileMode
}

// Spec describes one image.
type Spec struct {
	// Files are the component's own files (one layer).
	Files []File
	// RuntimeOf lists the image paths of dynamically linked executables
	// among Files: their ELF interpreter and needed shared libraries, as
	// this machine resolves them, go into a layer of their own (shared by
	// every image built on the same machine, so stored once).
	RuntimeOf []string
	// ExtraLibraries are further shared libraries (by soname) the
	// component loads with dlopen's dependencies, e.g. the C library parts
	// NVIDIA's libnvidia-ml.so.1 links against.
	ExtraLibraries []string
	// LibraryDirs are searched for libraries, in order (default
	// DefaultLibraryDirs).
	LibraryDirs []string
	Entrypoint  []string
	// User is "uid:gid" (numeric: the image has no /etc/passwd).
	User   string
	Env    []string
	Labels map[string]string
}

// Build makes the image.
func Build(s Spec) (v1.Image, error) {
	// OCI media types throughout (go-containerregistry's empty image
	// starts with Docker's).
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: s.Entrypoint,
			User:       s.User,
			Env:        append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, s.Env...),
			Labels:     s.Labels,
			WorkingDir: "/",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	var runtimeFiles []File
	if len(s.RuntimeOf) > 0 || len(s.ExtraLibraries) > 0 {
		runtimeFiles, err = runtimeClosure(s)
		if err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		files []File
		what  string
	}{{runtimeFiles, "shared libraries"}, {s.Files, "component files"}} {
		if len(l.files) == 0 {
			continue
		}
		layer, err := Layer(l.files)
		if err != nil {
			return nil, fmt.Errorf("%s layer: %w", l.what, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: "tessera imagebuild: " + l.what, Created: v1.Time{Time: epoch}}})
		if err != nil {
			return nil, fmt.Errorf("%s layer: %w", l.what, err)
		}
	}
	return img, nil
}

// runtimeClosure maps the runtime files of s's executables to image files.
func runtimeClosure(s Spec) ([]File, error) {
	dirs := s.LibraryDirs
	if len(dirs) == 0 {
		dirs = DefaultLibraryDirs
	}
	bySource := map[string]string{}
	for _, f := range s.Files {
		bySource[f.Path] = f.Source
	}
	var exes []string
	for _, p := range s.RuntimeOf {
		src, ok := bySource[p]
		if !ok {
			return nil, fmt.Errorf("RuntimeOf %s: no such file in the image", p)
		}
		exes = append(exes, src)
	}
	libs, err := RuntimeLibraries(exes, s.ExtraLibraries, dirs)
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(libs))
	for _, l := range libs {
		files = append(files, File{Source: l, Path: l, Mode: 0o755})
	}
	return files, nil
}

// Layer makes a reproducible layer of files; their parent directories are
// added (0755). Only regular files are read; symbolic links are followed.
func Layer(files []File) (v1.Layer, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"/": true}
	for i, f := range sorted {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image path %q is not absolute and clean", f.Path)
		}
		if i > 0 && sorted[i-1].Path == f.Path {
			return nil, fmt.Errorf("image path %s given twice", f.Path)
		}
		if err := addParents(tw, dirs, path.Dir(f.Path)); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Size: int64(len(data)), Mode: int64(f.Mode.Perm()), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// addParents writes directory entries for dir and its parents not yet written.
func addParents(tw *tar.Writer, done map[string]bool, dir string) error {
	if done[dir] {
		return nil
	}
	if err := addParents(tw, done, path.Dir(dir)); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir[1:] + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
}
