//go:build !tessera_sim

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunRejectsBadConfigBeforeTouchingAnything(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("version: v1\nnodeName: n\nplacement: scatter\n"), 0o600)
	cases := map[string]struct {
		args []string
		want string
	}{
		"flag":         {[]string{"--node-name", "n", "--split-count", "0"}, "splitCount: 0 out of range"},
		"file":         {[]string{"--config", cfg}, `placement: "scatter"`},
		"unknown flag": {[]string{"--no-such-flag"}, "no-such-flag"},
		"simulate":     {[]string{"--node-name", "n", "--simulate", "dgxh200"}, "tessera_sim"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := run(c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run(%v) = %v, want an error containing %q", c.args, err, c.want)
			}
		})
	}
}
