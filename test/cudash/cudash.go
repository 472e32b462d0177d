// Package cudash runs the CUDA test shell (shim/cuda-hook/test/cudash.c) and
// speaks its protocol: one command a line on its stdin, one answer line on its
// stdout, "ok ..." or "err <code> <name>". The hook's demo and the end-to-end
// demo drive their simulated containers' programs through it.
package cudash

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Shell is one running cudash process.
type Shell struct {
	// Name says whose process it is in errors.
	Name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

// HookEnv is the environment entry that loads the CUDA hook from libDir
// (the directory holding libtessera-hook.so) into a program, the way the
// node's /etc/ld.so.preload would in a container.
func HookEnv(libDir string) string {
	return "LD_PRELOAD=" + filepath.Join(libDir, "libtessera-hook.so")
}

// Start runs the cudash program at path with args and exactly the
// environment env (the simulated driver's, and HookEnv to run it under the
// hook). Its stderr is ours; it runs in its own process group and is killed
// when this process dies, so that no shell outlives a failed demo or test.
func Start(name, path string, env []string, args ...string) (*Shell, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdin of %s: %w", name, path, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdout of %s: %w", name, path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	return &Shell{Name: name, cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// Do sends one command and reads its one-line answer, whatever it says.
func (s *Shell) Do(command string) (string, error) {
	if err := s.Send(command); err != nil {
		return "", err
	}
	if !s.out.Scan() {
		return "", fmt.Errorf("%s: %q: no answer", s.Name, command)
	}
	return s.out.Text(), nil
}

// Must is Do for a command that must succeed: an answer other than "ok ..."
// is an error that quotes it.
func (s *Shell) Must(command string) (string, error) {
	out, err := s.Do(command)
	if err == nil && !strings.HasPrefix(out, "ok") {
		err = fmt.Errorf("%s: %q: %s", s.Name, command, out)
	}
	return out, err
}

// Send starts a command without waiting for its answer (a long launch); the
// next Do reads that answer first.
func (s *Shell) Send(command string) error {
	if _, err := fmt.Fprintln(s.in, command); err != nil {
		return fmt.Errorf("%s: %q: %w", s.Name, command, err)
	}
	return nil
}

// Pid is the shell's process id.
func (s *Shell) Pid() int { return s.cmd.Process.Pid }

// Exit asks the shell to exit and waits for it.
func (s *Shell) Exit() error {
	_ = s.Send("exit")
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("%s: exit: %w", s.Name, err)
	}
	return nil
}

// Kill ends the shell's process group at once (SIGKILL), as the node kills
// a container, and reaps it.
func (s *Shell) Kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// Field is the i-th space-separated word of an answer ("" past its end).
func Field(line string, i int) string {
	f := strings.Fields(line)
	if i < len(f) {
		return f[i]
	}
	return ""
}

// Value reads key=<n> from an answer line; 0 where the line has no such key.
func Value(line, key string) uint64 {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}
