package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// toolSource is one way a vendor backend reads its cards: a tool, and a
// function that runs it and parses what it printed into raw cards (Name,
// MemoryMiB and whatever else the tool says; the backend fills the rest).
type toolSource struct {
	tool string
	read func(ctx context.Context, r Runner) ([]Card, error)
}

// toolBackend is a Backend over vendor command-line tools. It tries its
// sources in order and uses the first that lists cards of its vendor. It
// has no change notifications: health comes with each Cards.
type toolBackend struct {
	name    string
	vendor  Vendor
	runner  Runner
	cat     *Catalog
	sources []toolSource
}

var _ Backend = (*toolBackend)(nil)

func (b *toolBackend) Name() string { return b.name }

func (b *toolBackend) Watch(context.Context, chan<- HealthEvent) error { return nil }

// Cards runs the sources in order. A tool that is not installed is skipped;
// one that fails or prints garbage is remembered and the next is tried. The
// result is ErrAbsent when no tool is installed or none lists a card of the
// vendor, and a failure when a tool was there but could not be read.
func (b *toolBackend) Cards(ctx context.Context) ([]Card, error) {
	var failures []error
	var absent []string
	for _, src := range b.sources {
		raw, err := src.read(ctx, b.runner)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		switch {
		case isNotFound(err):
			absent = append(absent, src.tool+" not found")
			continue
		case err != nil:
			failures = append(failures, err)
			continue
		}
		cards, err := b.finish(raw)
		if err != nil {
			failures = append(failures, fmt.Errorf("%s: %w", src.tool, err))
			continue
		}
		if len(cards) == 0 {
			absent = append(absent, fmt.Sprintf("%s lists no %s cards", src.tool, b.vendor))
			continue
		}
		return cards, nil
	}
	if len(failures) > 0 {
		return nil, errors.Join(failures...)
	}
	return nil, fmt.Errorf("%w: %s", ErrAbsent, strings.Join(absent, "; "))
}

// finish keeps the cards of the backend's vendor and fills in what the
// parsers leave: vendor, backend, canonical bus id, catalog model, ID and
// health.
func (b *toolBackend) finish(raw []Card) ([]Card, error) {
	var out []Card
	ids := map[string]bool{}
	for _, c := range raw {
		if c.Vendor != "" && c.Vendor != b.vendor {
			continue
		}
		c.Vendor = b.vendor
		c.Backend = b.name
		c.PCIBusID = CanonicalBusID(c.PCIBusID)
		if c.MemoryFreeMiB > c.MemoryMiB {
			c.MemoryFreeMiB = c.MemoryMiB
		}
		b.cat.Resolve(&c)
		c.Vendor = b.vendor // Resolve keeps it; say so for a derived key too
		c.ID = toolCardID(c)
		if ids[c.ID] {
			return nil, fmt.Errorf("two cards with id %q", c.ID)
		}
		ids[c.ID] = true
		if !c.Health.Healthy && c.Health.Reason == "" {
			c.Health = Healthy()
		}
		out = append(out, c)
	}
	return out, nil
}

// toolCardID builds a card ID from what a tool reports: its UUID, else its
// PCI bus id, else its index, each prefixed with the vendor so IDs of
// different vendors never meet.
func toolCardID(c Card) string {
	switch {
	case c.UUID != "":
		return string(c.Vendor) + "-" + c.UUID
	case c.PCIBusID != "":
		return string(c.Vendor) + "-" + c.PCIBusID
	default:
		return fmt.Sprintf("%s-index-%d", c.Vendor, c.Index)
	}
}

// runTool runs a tool through r and rejects empty output.
func runTool(ctx context.Context, r Runner, tool string, args ...string) ([]byte, error) {
	out, err := r.Run(ctx, tool, args...)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil, fmt.Errorf("%s %s: printed nothing", tool, strings.Join(args, " "))
	}
	return out, nil
}

// parseErr wraps a parse failure with the command that printed the output.
func parseErr(tool string, args []string, err error) error {
	return fmt.Errorf("%s %s: output not understood: %w", tool, strings.Join(args, " "), err)
}
