package controlplane

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestOrphanDirsOfDeadTestBinariesAreRemoved(t *testing.T) {
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := mkOwned(t, dead.Process.Pid)
	mine := mkOwned(t, os.Getpid())
	removeOrphanDirs(t.Logf)
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s of dead pid %d kept (stat: %v)", orphan, dead.Process.Pid, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("%s of a live test binary removed: %v", mine, err)
	}
}

func mkOwned(t *testing.T, pid int) string {
	d, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}
