package gossip

import (
	"context"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
)

// floorHandler passes on only records at or above its level. Gossipsub logs
// every RPC at debug; a node at debug level wants its own lines, not those.
// It also drops records with the message drop, if set.
type floorHandler struct {
	slog.Handler
	min  slog.Level
	drop string
}

func (h floorHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h floorHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.drop != "" && r.Message == h.drop {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h floorHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return floorHandler{h.Handler.WithAttrs(as), h.min, h.drop}
}

func (h floorHandler) WithGroup(name string) slog.Handler {
	return floorHandler{h.Handler.WithGroup(name), h.min, h.drop}
}

// noDecayWarning is what gossipsub warns, for every message delivered, when
// the host's connection manager cannot keep decaying tags (in-memory hosts
// have none): it never registered the tag it then fails to bump. Nothing
// is wrong; the tag only weighs which connections to keep.
const noDecayWarning = "error bumping delivery tag"

// pubsubLogger is the logger gossipsub gets for host h: warnings and errors
// only, less the one above where h's connection manager has no decay.
func pubsubLogger(l *slog.Logger, h host.Host) *slog.Logger {
	f := floorHandler{Handler: l.Handler(), min: slog.LevelWarn}
	if _, ok := connmgr.SupportsDecay(h.ConnManager()); !ok {
		f.drop = noDecayWarning
	}
	return slog.New(f)
}
