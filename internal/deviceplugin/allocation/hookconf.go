package allocation

import (
	"bytes"
	"fmt"
	"path/filepath"
)

// HookConfPath is where every hooked container finds the node's hook
// configuration. Kubelet gives a pod's own env precedence over Allocate's,
// so inside a container the hook ignores TESSERA_REGION, TESSERA_LIMITS,
// TESSERA_CORE_LIMITS and TESSERA_CTX_RESERVE_MIB and takes its files from
// the fixed paths of these read-only mounts instead, after checking in
// /proc/self/mountinfo that they are this plugin's (docs/hook.md). The Envs
// stay in the response for programs run outside a container.
const HookConfPath = "/run/tessera/hook.conf"

func (b *Builder) hookConfHostPath() string { return filepath.Join(b.StateDir, "hook.conf") }

// hookConf is the file's content: what the hook cannot learn from the
// mounted files themselves. It is node-wide, so the responses of one
// container's resources mount the same file and kubelet merges them.
func (b *Builder) hookConf() []byte {
	var buf bytes.Buffer
	buf.WriteString("# tessera hook configuration, written by the device plugin (docs/hook.md)\n")
	if b.HookLogLevel != "" {
		fmt.Fprintf(&buf, "log=%s\n", b.HookLogLevel)
	}
	fmt.Fprintf(&buf, "ctx-reserve-mib=%d\n", b.ContextReserveMiB)
	return buf.Bytes()
}

// writeHookConf writes hook.conf only when its content changes: running
// containers keep the inode they mounted, and an unchanged file keeps it
// the current one.
func (b *Builder) writeHookConf() error {
	if err := ensureFile(b.hookConfHostPath(), b.hookConf()); err != nil {
		return fmt.Errorf("hook.conf: %w", err)
	}
	return nil
}
