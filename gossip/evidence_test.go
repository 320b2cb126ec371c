package gossip

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

func TestEvidenceTravelsSignedWithTheAd(t *testing.T) {
	p := newPeerID(t)
	ad := testAd(p, 1, t0)
	ad.Cards[0].Evidence = []CardEvidence{
		{UUID: "GPU-aaaa", Evidence: device.Evidence{Serial: "1654922000001", BoardPartNumber: "692-2G520-0200-000",
			PCIDeviceID: 0x233010de, PCISubsystemID: 0x16c110de, DriverVersion: "550.54.15", MaxSMClockMHz: 1980, MaxMemClockMHz: 2619}, MemoryMiB: 81559},
	}
	ad.Cards[1].Simulated = true
	got, err := DecodeAd(mustEncode(t, ad), p, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Cards, ad.Cards) {
		t.Fatalf("decoded %+v\nwant    %+v", got.Cards, ad.Cards)
	}
	if c := got.Claims(); !reflect.DeepEqual(c, []string{"serial:1654922000001", "uuid:gpu-aaaa"}) {
		t.Errorf("claims %v", c)
	}
	if s := got.SimulatedModels(); !reflect.DeepEqual(s, []string{"rtx4090-48g"}) {
		t.Errorf("simulated models %v", s)
	}
}

func TestEvidenceThatDoesNotParseIsRejected(t *testing.T) {
	p := newPeerID(t)
	for name, c := range map[string]struct {
		ev   []CardEvidence
		sim  bool
		want string
	}{
		"no uuid or serial": {ev: []CardEvidence{{MemoryMiB: 1}}, want: "neither a UUID nor a serial"},
		"more than cards":   {ev: make([]CardEvidence, 9), want: "9 evidence entries for 8 cards"},
		"uuid twice":        {ev: []CardEvidence{{UUID: "GPU-a"}, {UUID: "gpu-A"}}, want: "claimed twice"},
		"control chars":     {ev: []CardEvidence{{UUID: "GPU-\x01"}}, want: "control characters"},
		"long serial":       {ev: []CardEvidence{{Evidence: device.Evidence{Serial: strings.Repeat("9", MaxLabelLen+1)}}}, want: "serial"},
		"absurd clock":      {ev: []CardEvidence{{UUID: "GPU-a", Evidence: device.Evidence{MaxSMClockMHz: 1 << 30}}}, want: "clocks"},
		"simulated":         {ev: []CardEvidence{{UUID: "GPU-a"}}, sim: true, want: "simulated cards with hardware evidence"},
	} {
		ad := testAd(p, 1, t0)
		ad.Cards[0].Evidence, ad.Cards[0].Simulated = c.ev, c.sim
		// Encode by hand, as a forger would: EncodeAd refuses it.
		if _, err := EncodeAd(ad); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("%s: EncodeAd = %v, want ErrBadEvidence", name, err)
		}
		_, err := DecodeAd(env(ad, nil), p, t0)
		if !errors.Is(err, ErrBadEvidence) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DecodeAd = %v, want bad evidence naming %q", name, err, c.want)
		}
	}
}

func TestAdvertiserPublishesEvidenceAndMarksSimulatedCards(t *testing.T) {
	real := card(t, "h100-sxm-80g", 0, CardFree)
	real.Card.UUID = "GPU-0000"
	real.Card.Evidence = &device.Evidence{Serial: "1650000000000"}
	copied := card(t, "h100-sxm-80g", 1, CardBusy)
	copied.Card.UUID, copied.Card.Evidence = "GPU-0000", real.Card.Evidence // a backend listing one card twice: kept once
	sim := card(t, "rtx4090-48g", 2, CardFree)
	sim.Card.UUID, sim.Card.Backend = "GPU-sim", device.SimBackendName
	r := &recorder{}
	newTestAdvertiser(t, r, Supply{Cards: []SupplyCard{real, copied, sim}}, AdvertiserConfig{})
	ad := r.waitAds(t, 1)
	if len(ad.Cards) != 2 {
		t.Fatalf("groups %+v", ad.Cards)
	}
	h, s := ad.Cards[0], ad.Cards[1]
	if h.Simulated || len(h.Evidence) != 1 || h.Evidence[0].UUID != "GPU-0000" || h.Evidence[0].Serial != "1650000000000" {
		t.Errorf("real group %+v", h)
	}
	if !s.Simulated || len(s.Evidence) != 0 {
		t.Errorf("simulated group %+v: want marked, without evidence", s)
	}
}
