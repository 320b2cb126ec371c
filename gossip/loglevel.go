package gossip

import (
	"context"
	"log/slog"
)

// floorHandler passes on only records at or above its level. Gossipsub logs
// every RPC at debug; a node at debug level wants its own lines, not those.
type floorHandler struct {
	slog.Handler
	min slog.Level
}

func (h floorHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h floorHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return floorHandler{h.Handler.WithAttrs(as), h.min}
}

func (h floorHandler) WithGroup(name string) slog.Handler {
	return floorHandler{h.Handler.WithGroup(name), h.min}
}

// pubsubLogger is the logger gossipsub gets: warnings and errors only.
func pubsubLogger(l *slog.Logger) *slog.Logger {
	return slog.New(floorHandler{l.Handler(), slog.LevelWarn})
}
