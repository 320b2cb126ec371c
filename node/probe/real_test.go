//go:build linux && cgo

package probe

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// TestRealProbe runs the probe on this machine's NVIDIA cards through the
// CUDA driver, as a supplier does, and judges the answers as a coordinator
// does (the digests of sampled blocks recomputed on the CPU, the time
// against the catalog's bandwidth). It needs a GPU:
//
//	GPUMESH_REAL_CUDA=1 go test -run TestRealProbe -v ./node/probe/
//
// It logs each card's model, time and measured bandwidth.
func TestRealProbe(t *testing.T) {
	if os.Getenv("GPUMESH_REAL_CUDA") != "1" {
		t.Skip("set GPUMESH_REAL_CUDA=1 on a machine with an NVIDIA card and its driver")
	}
	ctx := context.Background()
	cards, statuses, err := device.Discover(ctx, device.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var nvidia []device.Card
	for _, c := range cards {
		if c.Vendor == device.VendorNVIDIA && c.Health.Healthy {
			nvidia = append(nvidia, c)
		}
	}
	if len(nvidia) == 0 {
		t.Fatalf("no healthy NVIDIA card found: %+v", statuses)
	}
	cfg := Config{}.WithDefaults()
	models := map[string]uint64{}
	for _, c := range nvidia {
		if old, ok := models[c.Model]; !ok || c.MemoryMiB < old {
			models[c.Model] = c.MemoryMiB
		}
	}
	ch, unprobed, err := cfg.NewChallenge(models)
	if err != nil {
		t.Fatal(err)
	}
	if len(unprobed) > 0 {
		t.Logf("models without a catalog bandwidth, not probed: %v", unprobed)
	}
	be := NewCUDA()
	start := time.Now()
	answers := be.Run(ctx, ch, nvidia)
	elapsed := time.Since(start)
	for _, a := range answers {
		if a.Err != "" {
			t.Errorf("card %s (%s): %s", a.Card, a.Model, a.Err)
		}
	}
	verdicts := cfg.Judge(ch, Answer{Nonce: ch.Nonce, Cards: answers, Backend: be.Name()}, elapsed, 0)
	for _, v := range verdicts {
		w := ch.Work[v.Model]
		t.Logf("%s: %d cards, %d MiB × %d rounds (%.1f GB of traffic each) in %s with setup: %s; performs as %q, refused %v",
			v.Model, v.Cards, w.Words*8>>20, w.Rounds, w.Bytes()/1e9, elapsed.Round(time.Millisecond), v.Detail, v.PerformsAs, v.Refused)
		if v.Refused || v.PerformsAs != "" {
			t.Errorf("%s did not pass its own probe: %s", v.Model, v.Detail)
		}
	}
	if elapsed > 10*time.Second {
		t.Errorf("the probe took %s, over the 10 s target", elapsed)
	}
	if len(verdicts) == 0 {
		t.Error("no verdict")
	}
}
