package mesh

import (
	"context"
	"log/slog"
	"strings"
)

// memberlistLog turns memberlist's log lines ("[WARN] memberlist: ...")
// into slog records, and spots the line that reports this node's own failed
// probe, for which memberlist has no callback.
type memberlistLog struct {
	log       *slog.Logger
	onSuspect func(name string)
}

const (
	suspectPrefix = "memberlist: Suspect "
	suspectSuffix = " has failed, no acks received"
)

// logLevels maps memberlist's level tags to slog levels. memberlist logs
// routine churn (a failed send to a peer that just left) as errors, so those
// become warnings.
var logLevels = [...]struct {
	tag   string
	level slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelWarn},
}

// Write implements io.Writer for a log.Logger made with no prefix or flags.
func (w *memberlistLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, t := range logLevels {
		if rest, ok := strings.CutPrefix(line, t.tag); ok {
			line, level = rest, t.level
			break
		}
	}
	if w.onSuspect != nil && strings.HasPrefix(line, suspectPrefix) && strings.HasSuffix(line, suspectSuffix) {
		w.onSuspect(line[len(suspectPrefix) : len(line)-len(suspectSuffix)])
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, line)
	}
	return len(p), nil
}
