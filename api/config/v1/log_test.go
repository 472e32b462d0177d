package v1

import (
	"io"
	"os"
	"strings"
	"testing"
)

// logged returns what write logs through LogConfig{level, format}.
func logged(t *testing.T, level, format string, write func(l LogConfig)) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	write(LogConfig{Level: level, Format: format})
	os.Stderr = stderr
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestLogConfigLogger(t *testing.T) {
	out := logged(t, "warn", "text", func(l LogConfig) {
		log := l.Logger("tessera-x")
		log.Info("quiet")
		log.Warn("loud")
	})
	if strings.Contains(out, "quiet") || !strings.Contains(out, "msg=loud") || !strings.Contains(out, "component=tessera-x") {
		t.Fatalf("level warn, format text: got %q", out)
	}
	out = logged(t, "debug", "json", func(l LogConfig) { l.Logger("tessera-y").Debug("d") })
	if !strings.Contains(out, `"msg":"d"`) || !strings.Contains(out, `"component":"tessera-y"`) {
		t.Fatalf("level debug, format json: got %q", out)
	}
}
