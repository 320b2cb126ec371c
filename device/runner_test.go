package device

import (
	"context"
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestExecRunner(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses sh")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	ctx := context.Background()
	out, err := ExecRunner{}.Run(ctx, "sh", "-c", "echo '{\"ok\": 1}'")
	if err != nil || strings.TrimSpace(string(out)) != `{"ok": 1}` {
		t.Errorf("Run = %q, %v", out, err)
	}
	_, err = ExecRunner{}.Run(ctx, "gpumesh-no-such-tool-xyz")
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("missing tool: %v, want exec.ErrNotFound", err)
	}
	_, err = ExecRunner{}.Run(ctx, "sh", "-c", "echo 'error: no devices' >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3: error: no devices") {
		t.Errorf("failing tool: %v", err)
	}
	_, err = ExecRunner{MaxOutput: 10}.Run(ctx, "sh", "-c", "echo 0123456789abcdef")
	if err == nil || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("chatty tool: %v", err)
	}
	start := time.Now()
	_, err = ExecRunner{Timeout: 50 * time.Millisecond}.Run(ctx, "sh", "-c", "exec sleep 30")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("hung tool: %v after %v", err, time.Since(start))
	}
}
