// Command device-plugin is tessera's kubelet device plugin: it advertises
// GPU slots, memory units, compute percent and MIG devices, and hands each
// container what the CUDA hook needs to enforce its share.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/daemon"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/podresources"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(1)
	}
}

// environment is where the plugin's outside world comes from: real NVML,
// API server and kubelet, or a simulated node (build tag tessera_sim).
type environment struct {
	lib          nvml.Interface
	client       kube.Client
	podResources podresources.Lister
}

func run(args []string) error {
	fs := flag.NewFlagSet("device-plugin", flag.ContinueOnError)
	flags := configv1.BindFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig path (default: in-cluster)")
	nvmlLibrary := fs.String("nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic loader's search)")
	simulate := fs.String("simulate", "", "run on a simulated node (dgxa100, dgxh100, dgxh200); needs the tessera_sim build tag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := flags.Resolve()
	if err != nil {
		return err
	}
	log := cfg.Log.Logger("tessera-device-plugin")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var env *environment
	if *simulate != "" {
		env, err = simulatedEnvironment(*simulate, cfg)
	} else {
		env, err = realEnvironment(cfg, *kubeconfig, *nvmlLibrary)
	}
	if err != nil {
		return err
	}
	if ret := env.lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML init: %v", ret)
	}
	defer env.lib.Shutdown()
	d, err := daemon.New(cfg, env.lib, env.client, env.podResources, log)
	if err != nil {
		return err
	}
	if *simulate != "" {
		// The simulated API server never holds the pods kubelet admits.
		d.Chooser.AwaitPod = 0
	}
	return d.Run(ctx)
}

// realEnvironment connects to the API server and kubelet. nvmlLibrary is
// a path of libnvidia-ml.so.1 when the driver's library directory is
// mounted somewhere the loader does not search: naming the file avoids
// LD_LIBRARY_PATH, which would also pick up that directory's C library.
func realEnvironment(cfg *configv1.Config, kubeconfig, nvmlLibrary string) (*environment, error) {
	client, err := kube.NewFromKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	pr, err := podresources.Dial(cfg.PodResourcesSocket)
	if err != nil {
		return nil, err
	}
	var opts []nvml.LibraryOption
	if nvmlLibrary != "" {
		opts = append(opts, nvml.WithLibraryPath(nvmlLibrary))
	}
	return &environment{lib: nvml.New(opts...), client: client, podResources: pr}, nil
}
