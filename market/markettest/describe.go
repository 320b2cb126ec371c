package markettest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// Describe renders a message on one line for traces and scenario files:
// "a→b bid j1 r1 L3 2 cards"; a broadcast shows as "a→*".
func Describe(m market.Message) string {
	to := m.To
	if to == market.Broadcast {
		to = "*"
	}
	head := fmt.Sprintf("%s→%s %s %s", m.From, to, m.Payload.Type(), m.Payload.JobID())
	var tail string
	switch p := m.Payload.(type) {
	case *market.BidRequest:
		tail = fmt.Sprintf("r%d want=%d min=%d", p.Round, p.Want, p.Min)
	case *market.Bid:
		tail = fmt.Sprintf("r%d %s %s", p.Round, p.Lease, bidCards(p.Cards))
	case *market.Decline:
		tail = fmt.Sprintf("r%d %q", p.Round, p.Reason)
	case *market.Award:
		tail = fmt.Sprintf("r%d %s share=%d epoch=%d cards=%s price=%.2f start=%v", p.Round, p.Lease, p.Share, p.Epoch, strings.Join(p.Cards, ","), p.PriceCNY, p.Start)
		if p.Restore != nil {
			tail += fmt.Sprintf(" restore=%s@e%d", p.Restore.Manifest[:min(len(p.Restore.Manifest), 15)], p.Restore.Epoch)
		}
	case *market.Accept:
		tail = fmt.Sprintf("share=%d epoch=%d %s", p.Share, p.Epoch, p.Lease)
	case *market.Reject:
		tail = fmt.Sprintf("share=%d epoch=%d %s %q", p.Share, p.Epoch, p.Lease, p.Reason)
	case *market.Release:
		tail = p.Lease
	case *market.Start:
		tail = fmt.Sprintf("share=%d epoch=%d rank=%d/%d master=%s", p.Share, p.Epoch, p.Gang.NodeRank, p.Gang.NNodes, p.Gang.Master)
	case *market.Renewal:
		tail = fmt.Sprintf("share=%d epoch=%d usage=%.0f", p.Share, p.Epoch, p.CardSeconds)
	case *market.RenewalAck:
		tail = fmt.Sprintf("share=%d epoch=%d", p.Share, p.Epoch)
	case *market.Stop:
		tail = fmt.Sprintf("share=%d epoch=%d %q", p.Share, p.Epoch, p.Reason)
	case *market.AttemptEnded:
		tail = fmt.Sprintf("share=%d epoch=%d %s code=%d usage=%.0f", p.Share, p.Epoch, p.Cause, p.ExitCode, p.CardSeconds)
		if p.Reason != "" {
			tail += fmt.Sprintf(" reason=%q", p.Reason)
		}
		if p.Outputs != "" {
			tail += " outputs=" + p.Outputs[:min(len(p.Outputs), 15)] + "…"
		}
	case *market.EndAck:
		tail = fmt.Sprintf("share=%d epoch=%d", p.Share, p.Epoch)
	}
	return head + " " + tail
}

// describeTo is Describe for a message delivered to one receiver: a
// broadcast shows as "a→b(*)".
func describeTo(m market.Message, to string) string {
	line := Describe(m)
	if m.To == market.Broadcast {
		line = strings.Replace(line, "→*", "→"+to+"(*)", 1)
	}
	return line
}

func bidCards(cards []market.BidCard) string {
	var parts []string
	for i := 0; i < len(cards); {
		j := i
		for j < len(cards) && cards[j].Model == cards[i].Model && cards[j].PriceCNY == cards[i].PriceCNY && cards[j].Preempts == cards[i].Preempts {
			j++
		}
		s := fmt.Sprintf("%d×%s@%.2f", j-i, cards[i].Model, cards[i].PriceCNY)
		if cards[i].Preempts {
			s += "(preempts)"
		}
		parts = append(parts, s)
		i = j
	}
	return strings.Join(parts, ",")
}

// Cards makes simulated cards for node from "model:count,model:count"
// ("h100-sxm-80g:8,rtx4090-24g:2"), with IDs "<node>-g0", "<node>-g1", ...
// and the figures of the default catalog.
func Cards(node, spec string) ([]device.Card, error) {
	return CatalogCards(device.DefaultCatalog(), node, spec)
}

// CatalogCards is Cards with the figures of cat.
func CatalogCards(cat *device.Catalog, node, spec string) ([]device.Card, error) {
	var out []device.Card
	for _, part := range strings.Split(spec, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		key, count, ok := strings.Cut(part, ":")
		n := 1
		if ok {
			v, err := strconv.Atoi(count)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("markettest: bad card count in %q", part)
			}
			n = v
		}
		m, known := cat.Lookup(key)
		if !known {
			return nil, fmt.Errorf("markettest: unknown model %q", key)
		}
		for i := 0; i < n; i++ {
			out = append(out, device.Card{
				ID: fmt.Sprintf("%s-g%d", node, len(out)), Vendor: m.Vendor, Model: m.Key, Name: m.NamePattern, Known: true,
				Index: len(out), Backend: "markettest", MemoryMiB: m.MemoryGiB * 1024, MemoryFreeMiB: m.MemoryGiB * 1024,
				ComputeUnits: m.ComputeUnits, BandwidthGBs: m.BandwidthGBs, Health: device.Healthy(),
			})
		}
	}
	return out, nil
}

// MustCards is Cards that panics on error, for tests.
func MustCards(node, spec string) []device.Card {
	c, err := Cards(node, spec)
	if err != nil {
		panic(err)
	}
	return c
}
