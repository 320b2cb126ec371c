package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Lines renders the progress as a compact block of a few lines, for a
// terminal that redraws it every second.
func (p Progress) Lines() []string {
	var out []string
	head := fmt.Sprintf("gpumesh demo · seed %d · %s", p.Seed, Describe(p.Plan))
	switch p.Phase {
	case PhaseStarting:
		return []string{head, fmt.Sprintf("starting the nodes… %d of %d up", p.Started, len(p.Plan))}
	case PhaseForming:
		f := p.Formation
		return []string{head, fmt.Sprintf("mesh forming: the gateway hears %d of %s, %d of %s, %d of %s",
			f.Members, text.Count(f.Up, "node"), f.Coordinators, text.Count(f.Coordinating, "coordinator"), f.Book, text.Count(f.Cards, "card"))}
	case PhaseStopping:
		out = append(out, head+" · stopping the nodes…")
	default:
		out = append(out, fmt.Sprintf("%s · %s / %s", head, p.Elapsed.Truncate(time.Second), p.Duration))
	}
	j := p.Jobs
	out = append(out, fmt.Sprintf("jobs   %d submitted · %d placed · %d running · %d done · %d waiting · %d rerouted · %d failed",
		j.Submitted, j.Placed, j.Running, j.Succeeded, j.Waiting, j.Rerouted, j.Failed))
	busy, up := 0, 0
	var parts []string
	for _, m := range p.Busy {
		busy += m.Busy
		up += m.Up
		if m.Up > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d", ShortModel(m.Model), m.Busy, m.Up))
		}
	}
	out = append(out, fmt.Sprintf("cards  %d/%d busy · %s", busy, up, strings.Join(parts, " · ")))
	mesh := fmt.Sprintf("mesh   %d/%d nodes up · %d left · %d came back · spend ¥%.4f", p.Formation.Up, len(p.Plan), p.Left, p.Joined, p.SpendCNY)
	out = append(out, mesh)
	if p.API != "" {
		out = append(out, fmt.Sprintf("open   http://%s/?token=%s · or GPUMESH_API_TOKEN=%s gpumesh jobs --api %s", p.API, p.Token, p.Token, p.API))
	}
	return out
}

// ShortModel is a catalog key shortened for a status line: "h100-sxm-80g"
// → "h100", "rtx4090-48g" → "4090/48g".
func ShortModel(key string) string {
	switch key {
	case "rtx4090-24g":
		return "4090"
	case "rtx4090-48g":
		return "4090/48g"
	case "rtx5090-32g":
		return "5090"
	case "mtt-s4000-48g":
		return "s4000"
	case "hygon-bw1000-64g":
		return "bw1000"
	case "kunlun-p800-96g":
		return "p800"
	}
	if i := strings.IndexByte(key, '-'); i > 0 {
		return key[:i]
	}
	return key
}
