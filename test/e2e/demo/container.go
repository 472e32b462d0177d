package demo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// container is one container's program: the CUDA test shell (cudash) on
// the simulated driver, with the environment and files the device plugin's
// Allocate responses gave the container. Without root there is no mount
// namespace: the container paths of the response's mounts are mapped back
// to their host paths, and the hook is preloaded with LD_PRELOAD instead of
// the /etc/ld.so.preload mount.
type container struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	// ordinal is the CUDA device ordinal of the container's GPU; devices
	// how many CUDA devices the container sees.
	ordinal, devices int
}

// containerEnv is what the container's processes get: the responses'
// environment with container paths mapped to host paths, and the hook.
func containerEnv(n *simNode, resps []*pluginapi.ContainerAllocateResponse) (env, shown, mounts []string) {
	env = append(env, n.driverEnv...)
	env = append(env, "LD_PRELOAD="+filepath.Join(n.libDir, "libtessera-hook.so"), "TESSERA_LOG=error")
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
func startContainer(cudash, name string, env []string, uuid string) (*container, error) {
	cmd := exec.Command(cudash)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	// Its own process group, and it dies with the demo whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, cudash, err)
	}
	c := &container{name: name, cmd: cmd, in: in, out: bufio.NewScanner(out), ordinal: -1}
	if _, err := c.must("init"); err != nil {
		c.kill()
		return nil, err
	}
	// The devices it sees: CUDA_VISIBLE_DEVICES from Allocate narrows them
	// (the driver honours it), the hook matches its limits by UUID.
	for i := 0; i < gpuCount; i++ {
		line, err := c.do(fmt.Sprintf("uuid %d", i))
		if err != nil {
			c.kill()
			return nil, err
		}
		if !strings.HasPrefix(line, "ok") {
			break // no device i
		}
		c.devices++
		if strings.TrimPrefix(field(line, 1), "uuid=") == uuid {
			c.ordinal = i
		}
	}
	if c.ordinal < 0 {
		c.kill()
		return nil, fmt.Errorf("%s: no CUDA device has UUID %s", name, uuid)
	}
	if _, err := c.must(fmt.Sprintf("ctx %d", c.ordinal)); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// do sends one command and reads its one-line answer.
func (c *container) do(command string) (string, error) {
	if _, err := fmt.Fprintln(c.in, command); err != nil {
		return "", fmt.Errorf("%s: %q: %w", c.name, command, err)
	}
	if !c.out.Scan() {
		return "", fmt.Errorf("%s: %q: no answer", c.name, command)
	}
	return c.out.Text(), nil
}

// must is do for commands that must succeed.
func (c *container) must(command string) (string, error) {
	out, err := c.do(command)
	if err == nil && !strings.HasPrefix(out, "ok") {
		err = fmt.Errorf("%s: %q: %s", c.name, command, out)
	}
	return out, err
}

// send starts a command without waiting for its answer (a long launch).
func (c *container) send(command string) error {
	_, err := fmt.Fprintln(c.in, command)
	return err
}

// memInfo is what cuMemGetInfo says in the container.
func (c *container) memInfo() (free, total uint64, err error) {
	line, err := c.must("info")
	if err != nil {
		return 0, 0, err
	}
	return num(line, "free"), num(line, "total"), nil
}

// alloc tries one allocation and says what happened, as the program saw
// it; result is the CUDA result's name.
func (c *container) alloc(bytes uint64) (result, said string, err error) {
	out, err := c.do(fmt.Sprintf("alloc x %d", bytes))
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
		return "", "", fmt.Errorf("%s: alloc: %s", c.name, out)
	}
	result = field(out, 2)
	return result, fmt.Sprintf("cuMemAlloc(%s) -> %s; still %s used of %s", GiB(bytes), result, GiB(total-free), GiB(total)), nil
}

func (c *container) pid() int { return c.cmd.Process.Pid }

// kill ends the container's process group at once (SIGKILL) and reaps it.
func (c *container) kill() {
	if c.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	_ = c.cmd.Wait()
}

func field(line string, i int) string {
	f := strings.Fields(line)
	if i < len(f) {
		return f[i]
	}
	return ""
}

// num reads key=<n> from an answer line.
func num(line, key string) uint64 {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}
