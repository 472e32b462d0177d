// Command tessera-images writes tessera's container images as OCI archives
// (`make images`): <out>/<component>.tar for each of deploy/imagebuild's
// components, tagged with the Helm chart's appVersion so the chart's
// default values use exactly these images, and <out>/digests.txt listing
// "<reference> <manifest digest>" per image.
//
//	tessera-images --bin bin --lib lib --chart deploy/helm/tessera --out build/images
//
// Import on a node without a registry: ctr -n k8s.io images import build/images/device-plugin.tar
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/deploy/imagebuild"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tessera-images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("tessera-images", flag.ContinueOnError)
	binDir := fs.String("bin", "bin", "directory of the built binaries")
	libDir := fs.String("lib", "lib", "directory of libtessera-hook.so")
	chart := fs.String("chart", "deploy/helm/tessera", "Helm chart whose appVersion tags the images")
	repo := fs.String("repository", "tessera", "image name prefix (the chart's image.repository)")
	out := fs.String("out", "build/images", "output directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tag, err := appVersion(*chart)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	components := imagebuild.Components(*binDir, *libDir)
	names := make([]string, 0, len(components))
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	var digests strings.Builder
	for _, n := range names {
		start := time.Now()
		ref := fmt.Sprintf("%s/%s:%s", *repo, n, tag)
		img, err := imagebuild.Build(components[n])
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		file := filepath.Join(*out, n+".tar")
		if err := imagebuild.WriteArchive(file, ref, img); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fi, _ := os.Stat(file)
		fmt.Printf("%-40s %s %5.1f MB %s (%.1fs)\n", ref, d, float64(fi.Size())/1e6, file, time.Since(start).Seconds())
		fmt.Fprintf(&digests, "%s %s\n", ref, d)
	}
	return os.WriteFile(filepath.Join(*out, "digests.txt"), []byte(digests.String()), 0o644)
}

// appVersion reads the chart's appVersion.
func appVersion(chart string) (string, error) {
	data, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("%s/Chart.yaml: %w", chart, err)
	}
	if c.AppVersion == "" {
		return "", fmt.Errorf("%s/Chart.yaml: no appVersion", chart)
	}
	return c.AppVersion, nil
}
