package imagebuild

import (
	"archive/tar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations naming an image in an OCI layout's index: the OCI tag, and
// the full reference containerd's importer gives the image.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// WriteArchive writes img as an OCI image layout archive (a tar of
// oci-layout, index.json and blobs/) at file, named ref
// ("tessera/device-plugin:0.1.0"). The tar is reproducible like the image:
// sorted entries, owner 0:0, epoch times.
func WriteArchive(file, ref string, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Dir(file), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	tag := ref
	if i := lastColonAfterSlash(ref); i >= 0 {
		tag = ref[i+1:]
	}
	full, err := ContainerdName(ref)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: tag, annotationContainerdName: full})); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	return tarDir(dir, file)
}

// ContainerdName is ref as the kubelet's image lookup through containerd's
// CRI finds it: fully qualified, with Docker Hub named docker.io
// ("tessera/hook:0.1.0" → "docker.io/tessera/hook:0.1.0", "x:1" →
// "docker.io/library/x:1"). `ctr images import` names an OCI archive's image
// exactly by its io.containerd.image.name annotation, without normalising
// it; an image imported as "tessera/hook:0.1.0" is invisible to a pod whose
// image is "tessera/hook:0.1.0", which the CRI looks up as
// docker.io/tessera/hook:0.1.0 (and then tries to pull).
func ContainerdName(ref string) (string, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	reg := t.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + t.RepositoryStr() + ":" + t.TagStr(), nil
}

// lastColonAfterSlash finds the tag separator of a reference (a registry
// port's colon comes before a slash).
func lastColonAfterSlash(ref string) int {
	for i := len(ref) - 1; i >= 0; i-- {
		switch ref[i] {
		case ':':
			return i
		case '/':
			return -1
		}
	}
	return -1
}

// tarDir writes dir's tree into a tar file, written to a temporary name
// and renamed, so an interrupted build leaves no half archive.
func tarDir(dir, file string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tmp := file + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(out)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX, Mode: 0o644, Typeflag: tar.TypeReg}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		} else {
			hdr.Size = fi.Size()
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
