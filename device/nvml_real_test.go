//go:build linux && cgo

package device

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealNVML runs the NVIDIA backend against the machine's own driver and
// prints what it finds. It needs a GPU, so it runs only when asked:
//
//	GPUMESH_REAL_NVML=1 go test -run TestRealNVML -v ./device/
//
// It checks what must hold on any NVIDIA machine: at least one card, each
// with a GPU- UUID, a canonical bus id, memory and a name; and that health
// watching starts, registers and stops cleanly.
func TestRealNVML(t *testing.T) {
	if os.Getenv("GPUMESH_REAL_NVML") != "1" {
		t.Skip("set GPUMESH_REAL_NVML=1 to run against the real NVIDIA driver")
	}
	b := NewNVIDIA(nvml.New(), DefaultCatalog())
	ctx := context.Background()
	start := time.Now()
	cards, err := b.Cards(ctx)
	if err != nil {
		t.Fatalf("Cards: %v", err)
	}
	t.Logf("listed %d card(s) in %v", len(cards), time.Since(start).Round(time.Millisecond))
	for _, c := range cards {
		out, _ := json.Marshal(c)
		t.Logf("%s", out)
		if len(c.UUID) < 8 || c.UUID[:4] != "GPU-" || c.ID != c.UUID {
			t.Errorf("card %d: id %q uuid %q", c.Index, c.ID, c.UUID)
		}
		if c.PCIBusID == "" || CanonicalBusID(c.PCIBusID) != c.PCIBusID {
			t.Errorf("card %d: bus id %q not canonical", c.Index, c.PCIBusID)
		}
		if c.MemoryMiB == 0 || c.MemoryFreeMiB > c.MemoryMiB || c.Name == "" || c.ComputeCapability == "" {
			t.Errorf("card %d incomplete: %+v", c.Index, c)
		}
		if !c.Health.Healthy {
			t.Errorf("card %d unhealthy: %+v", c.Index, c.Health)
		}
	}

	wctx, cancel := context.WithCancel(ctx)
	events := make(chan HealthEvent, 64)
	done := make(chan error, 1)
	go func() { done <- b.Watch(wctx, events) }()
	// Let Watch register and wait once on the driver, then stop it.
	timer := time.NewTimer(2 * nvmlWaitTimeout)
	select {
	case err := <-done:
		t.Fatalf("Watch returned early: %v", err)
	case <-timer.C:
	}
	cancel()
	stopAt := time.Now()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
	t.Logf("Watch stopped %v after cancel", time.Since(stopAt).Round(time.Millisecond))
	close(events)
	for ev := range events {
		t.Logf("health event while idle: %+v", ev)
	}
}
