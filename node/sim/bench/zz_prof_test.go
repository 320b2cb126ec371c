package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

func TestZZProfPlacement(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("ZZ_NODES"))
	cards, _ := strconv.Atoi(os.Getenv("ZZ_CARDS"))
	per, _ := strconv.Atoi(os.Getenv("ZZ_PER"))
	if nodes == 0 {
		t.Skip()
	}
	cfg := Config{Nodes: nodes, CardsPerNode: 4}.withDefaults()
	cfg.Dir = t.TempDir()
	if f := os.Getenv("ZZ_LOG"); f != "" {
		lf, _ := os.Create(f)
		defer lf.Close()
		cfg.Logger = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var notes []string
	ctx := context.Background()
	m, err := startFullMesh(ctx, cfg, &notes)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	t.Logf("formed in %v notes %v", m.formTook, notes)
	gw := m.c.Gateway()
	{
		c0, w0 := zzCPU(), time.Now()
		time.Sleep(3 * time.Second)
		t.Logf("idle: %.2f CPU-s/s", (zzCPU()-c0).Seconds()/time.Since(w0).Seconds())
	}
	if f := os.Getenv("ZZ_PROF"); f != "" {
		pf, _ := os.Create(f)
		pprof.StartCPUProfile(pf)
		defer pprof.StopCPUProfile()
	}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("zz-%d", i)
		spec := sleepSpec(id, cards)
		if per > 0 {
			spec.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: per}
		}
		spec.Models = nil
		c0 := zzCPU()
		t0, err := m.submit(ctx, gw, spec)
		if err != nil {
			t.Fatal(err)
		}
		acked := time.Since(t0)
		at, err := m.waitRunning(ctx, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("job %d: %d cards per-node %d: ack %v running %v cpu %v", i, cards, per, acked, at.Sub(t0), zzCPU()-c0)
		if err := m.cancelAll(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
}

func zzCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
