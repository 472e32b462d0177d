package demo

import (
	"fmt"
	"sort"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/test/cudash"
)

// container is one container's program: the CUDA test shell (cudash) on
// the simulated driver, with the environment and files the device plugin's
// Allocate responses gave the container. Without root there is no mount
// namespace: the container paths of the response's mounts are mapped back
// to their host paths, and the hook is preloaded with LD_PRELOAD instead of
// the /etc/ld.so.preload mount.
type container struct {
	*cudash.Shell
	// ordinal is the CUDA device ordinal of the container's GPU; devices
	// how many CUDA devices the container sees.
	ordinal, devices int
}

// containerEnv is what the container's processes get: the responses'
// environment with container paths mapped to host paths, and the hook.
func containerEnv(n *simNode, resps []*pluginapi.ContainerAllocateResponse) (env, shown, mounts []string) {
	env = append(env, n.driverEnv...)
	env = append(env, cudash.HookEnv(n.libDir), "TESSERA_LOG=error")
	seen := map[string]bool{}
	for _, r := range resps {
		for _, m := range r.Mounts {
			if !seen[m.ContainerPath] {
				mounts = append(mounts, m.ContainerPath)
			}
			seen[m.ContainerPath] = true
		}
		for k, v := range r.Envs {
			if strings.HasPrefix(k, "TESSERA_") && k != "TESSERA_LOG" && !seen[k] {
				shown = append(shown, k+"="+v)
			}
			seen[k] = true
			for _, m := range r.Mounts {
				if m.ContainerPath == v {
					v = m.HostPath
				}
			}
			env = append(env, k+"="+v)
		}
	}
	sort.Strings(shown)
	sort.Strings(mounts)
	return env, shown, mounts
}

// startContainer runs cudash with env and opens a context on the GPU uuid.
func startContainer(cudashPath, name string, env []string, uuid string) (*container, error) {
	shell, err := cudash.Start(name, cudashPath, env)
	if err != nil {
		return nil, err
	}
	c := &container{Shell: shell, ordinal: -1}
	if _, err := c.Must("init"); err != nil {
		c.Kill()
		return nil, err
	}
	// The devices it sees: CUDA_VISIBLE_DEVICES from Allocate narrows them
	// (the driver honours it), the hook matches its limits by UUID.
	for i := 0; i < gpuCount; i++ {
		line, err := c.Do(fmt.Sprintf("uuid %d", i))
		if err != nil {
			c.Kill()
			return nil, err
		}
		if !strings.HasPrefix(line, "ok") {
			break // no device i
		}
		c.devices++
		if strings.TrimPrefix(cudash.Field(line, 1), "uuid=") == uuid {
			c.ordinal = i
		}
	}
	if c.ordinal < 0 {
		c.Kill()
		return nil, fmt.Errorf("%s: no CUDA device has UUID %s", name, uuid)
	}
	if _, err := c.Must(fmt.Sprintf("ctx %d", c.ordinal)); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// memInfo is what cuMemGetInfo says in the container.
func (c *container) memInfo() (free, total uint64, err error) {
	line, err := c.Must("info")
	if err != nil {
		return 0, 0, err
	}
	return cudash.Value(line, "free"), cudash.Value(line, "total"), nil
}

// alloc tries one allocation and says what happened, as the program saw
// it; result is the CUDA result's name.
func (c *container) alloc(bytes uint64) (result, said string, err error) {
	out, err := c.Do(fmt.Sprintf("alloc x %d", bytes))
	if err != nil {
		return "", "", err
	}
	free, total, err := c.memInfo()
	if err != nil {
		return "", "", err
	}
	if strings.HasPrefix(out, "ok") {
		return "CUDA_SUCCESS", fmt.Sprintf("cuMemAlloc(%s) -> CUDA_SUCCESS; now %s used of %s", GiB(bytes), GiB(total-free), GiB(total)), nil
	}
	if !strings.HasPrefix(out, "err") {
		return "", "", fmt.Errorf("%s: alloc: %s", c.Name, out)
	}
	result = cudash.Field(out, 2)
	return result, fmt.Sprintf("cuMemAlloc(%s) -> %s; still %s used of %s", GiB(bytes), result, GiB(total-free), GiB(total)), nil
}
