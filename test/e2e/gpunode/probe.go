package gpunode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/deploy/imagebuild"
)

// ProbeImage is the user workload's image: ./probe/probe.c built here with
// its C library (and nothing of CUDA: the driver comes through CDI).
const ProbeImage = "tessera.local/e2e/gpuprobe:v1"

// probeBinary is the program's path in the image.
const probeBinary = "/usr/local/bin/gpuprobe"

// buildProbeImage compiles the probe and writes its image archive into dir.
func buildProbeImage(ctx context.Context, root, dir string) (string, error) {
	src := filepath.Join(root, "test", "e2e", "gpunode", "probe", "probe.c")
	bin := filepath.Join(dir, "gpuprobe")
	cc := exec.CommandContext(ctx, "gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, src, "-ldl")
	if out, err := cc.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gpunode: build the probe: %w\n%s", err, out)
	}
	img, err := imagebuild.Build(imagebuild.Spec{
		Files:     []imagebuild.File{{Source: bin, Path: probeBinary, Mode: 0o755}},
		RuntimeOf: []string{probeBinary},
		// What libtessera-hook.so, preloaded into the program, and the
		// driver's libraries link against besides libc.
		ExtraLibraries: []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"},
		Entrypoint:     []string{probeBinary},
		User:           "1000:1000",
	})
	if err != nil {
		return "", fmt.Errorf("gpunode: probe image: %w", err)
	}
	file := filepath.Join(dir, "gpuprobe.tar")
	if err := imagebuild.WriteArchive(file, ProbeImage, img); err != nil {
		return "", fmt.Errorf("gpunode: probe image: %w", err)
	}
	return file, nil
}

// parseProbe fills w from the probe's report (see probe.c).
func parseProbe(w *Workload, out string) {
	w.Output = nil
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		w.Output = append(w.Output, line)
		f := strings.Fields(line)
		num := func(i int) int64 {
			if i >= len(f) {
				return 0
			}
			n, _ := strconv.ParseInt(f[i], 10, 64)
			return n
		}
		switch f[0] {
		case "devices":
			w.Devices = int(num(1))
		case "device":
			if len(f) >= 6 && f[1] == "0" {
				w.GPU, w.TotalMiB = f[3], num(5)
			}
		case "alloc", "fill", "over":
			if len(f) >= 6 {
				if f[2] == "refused" && w.RefusedWith == "" {
					w.RefusedWith = f[3]
				}
				if used := num(5); used > w.AllocatedMiB {
					w.AllocatedMiB = used
				}
			}
		case "holding_mib":
			w.HoldingMiB = num(1)
		}
	}
}
