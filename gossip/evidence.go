package gossip

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip/gossippb"
)

// Hardware evidence in capacity ads: what each card's vendor library or
// tool reports of it (UUID, serial, board part number, PCI IDs, driver,
// memory, clocks), signed with the rest of the ad. It proves nothing alone
// — a node can write anything — but it makes claims comparable: a card
// UUID or serial claimed by two peers is a copied or invented card, and a
// coordinator holds both back (node/cardclaims).

// Limits of an ad's evidence.
const (
	// MaxEvidencePerAd bounds the evidence entries of one ad: a node
	// lists the cards of one machine (NVML sees 8 or 16), and 256 entries
	// of about 130 bytes keep an ad within MaxEnvelopeSize. A node with
	// more cards advertises evidence for none (Advertiser).
	MaxEvidencePerAd = 256
	// maxClockMHz bounds a reported clock.
	maxClockMHz = 100_000
)

func evidenceToPB(es []CardEvidence) []*gossippb.CardEvidence {
	if len(es) == 0 {
		return nil
	}
	out := make([]*gossippb.CardEvidence, len(es))
	for i, e := range es {
		out[i] = &gossippb.CardEvidence{
			Uuid: e.UUID, Serial: e.Serial, BoardPartNumber: e.BoardPartNumber,
			PciDeviceId: e.PCIDeviceID, PciSubsystemId: e.PCISubsystemID,
			DriverVersion: e.DriverVersion, MemoryMib: e.MemoryMiB,
			MaxSmClockMhz: e.MaxSMClockMHz, MaxMemClockMhz: e.MaxMemClockMHz,
		}
	}
	return out
}

func evidenceFromPB(es []*gossippb.CardEvidence) []CardEvidence {
	if len(es) == 0 {
		return nil
	}
	out := make([]CardEvidence, len(es))
	for i, e := range es {
		out[i] = CardEvidence{
			UUID: e.GetUuid(),
			Evidence: device.Evidence{
				Serial: e.GetSerial(), BoardPartNumber: e.GetBoardPartNumber(),
				PCIDeviceID: e.GetPciDeviceId(), PCISubsystemID: e.GetPciSubsystemId(),
				DriverVersion: e.GetDriverVersion(),
				MaxSMClockMHz: e.GetMaxSmClockMhz(), MaxMemClockMHz: e.GetMaxMemClockMhz(),
			},
			MemoryMiB: e.GetMemoryMib(),
		}
	}
	return out
}

// checkEvidence checks the evidence of an ad's groups as every receiver
// does: at most one entry per card of its group and MaxEvidencePerAd in
// all, none for simulated cards, every entry naming a UUID or a serial,
// labels of printable text within MaxLabelLen, memory and clocks within
// bounds, and no UUID or serial twice in the ad. Its errors carry
// ReasonBadEvidence.
func checkEvidence(groups []CardGroup) error {
	seen := map[string]bool{}
	total := 0
	for i, g := range groups {
		if len(g.Evidence) == 0 {
			continue
		}
		if g.Simulated {
			return msgErr(ReasonBadEvidence, "cards[%d] (%q): simulated cards with hardware evidence", i, g.Model)
		}
		if len(g.Evidence) > g.Total() {
			return msgErr(ReasonBadEvidence, "cards[%d] (%q): %d evidence entries for %d cards", i, g.Model, len(g.Evidence), g.Total())
		}
		total += len(g.Evidence)
		if total > MaxEvidencePerAd {
			return msgErr(ReasonBadEvidence, "more than %d evidence entries in one ad", MaxEvidencePerAd)
		}
		for k, e := range g.Evidence {
			if err := checkOneEvidence(e); err != nil {
				return msgErr(ReasonBadEvidence, "cards[%d] (%q) evidence[%d]: %s", i, g.Model, k, err.(*MessageError).Detail)
			}
			for _, key := range []string{"uuid:" + strings.ToLower(e.UUID), "serial:" + e.Serial} {
				if key == "uuid:" || key == "serial:" {
					continue
				}
				if seen[key] {
					return msgErr(ReasonBadEvidence, "cards[%d] (%q) evidence[%d]: %s claimed twice in one ad", i, g.Model, k, key)
				}
				seen[key] = true
			}
		}
	}
	return nil
}

func checkOneEvidence(e CardEvidence) error {
	if e.UUID == "" && e.Serial == "" {
		return msgErr(ReasonBadEvidence, "neither a UUID nor a serial")
	}
	for _, f := range []struct{ name, v string }{
		{"uuid", e.UUID}, {"serial", e.Serial}, {"board_part_number", e.BoardPartNumber}, {"driver_version", e.DriverVersion},
	} {
		if err := checkLabel(f.name, f.v, false); err != nil {
			return err
		}
	}
	switch {
	case e.MemoryMiB > MaxMemoryMiB:
		return msgErr(ReasonBadEvidence, "memory %d MiB: limit %d", e.MemoryMiB, MaxMemoryMiB)
	case e.MaxSMClockMHz > maxClockMHz || e.MaxMemClockMHz > maxClockMHz:
		return msgErr(ReasonBadEvidence, "clocks %d and %d MHz: limit %d", e.MaxSMClockMHz, e.MaxMemClockMHz, maxClockMHz)
	}
	return nil
}

// evidenceOf is what c's backend reports of its hardware as ad evidence,
// and false for a simulated card or one that reports neither a UUID nor a
// serial.
func evidenceOf(c device.Card) (CardEvidence, bool) {
	if c.Simulated() {
		return CardEvidence{}, false
	}
	e := CardEvidence{UUID: c.UUID, MemoryMiB: c.MemoryMiB}
	if c.Evidence != nil {
		e.Evidence = *c.Evidence
	}
	if e.UUID == "" && e.Serial == "" {
		return CardEvidence{}, false
	}
	if checkOneEvidence(e) != nil {
		return CardEvidence{}, false // a backend's odd string is left out, not the whole ad
	}
	return e, true
}

// tidyEvidence readies the evidence of an ad being built: none for a
// simulated group, entries sorted, a UUID or serial reported twice kept
// once, and none at all past MaxEvidencePerAd (see there).
func tidyEvidence(groups []CardGroup) {
	seen := map[string]bool{}
	total := 0
	for i := range groups {
		g := &groups[i]
		if g.Simulated {
			g.Evidence = nil
			continue
		}
		slices.SortFunc(g.Evidence, func(a, b CardEvidence) int {
			return cmp.Or(strings.Compare(a.UUID, b.UUID), strings.Compare(a.Serial, b.Serial))
		})
		g.Evidence = slices.DeleteFunc(g.Evidence, func(e CardEvidence) bool {
			dup := false
			for _, key := range []string{"uuid:" + strings.ToLower(e.UUID), "serial:" + e.Serial} {
				if key != "uuid:" && key != "serial:" {
					dup = dup || seen[key]
					seen[key] = true
				}
			}
			return dup
		})
		total += len(g.Evidence)
	}
	if total > MaxEvidencePerAd {
		for i := range groups {
			groups[i].Evidence = nil
		}
	}
}
