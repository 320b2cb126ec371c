package node

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/executor"
)

// BenchmarkAdvertise measures what a node of 64 cards spends on its driver
// each time the market hands it a capacity ad (every card that is
// reserved, starts or ends a job): its own book, the advertiser's supply
// and the membership summary. modelOf is what the runner spends finding a
// card's model, which every attempt's start and end does.
//
//	go test -run '^$' -bench Advertise -benchmem ./node/
func BenchmarkAdvertise(b *testing.B) {
	cat := device.DefaultCatalog()
	spec, err := device.ParseSimSpec("a100-80g:64", cat)
	if err != nil {
		b.Fatal(err)
	}
	sim, err := device.NewSim(spec, "bench", cat)
	if err != nil {
		b.Fatal(err)
	}
	net := mesh.NewSimNetwork(mesh.SimOptions{})
	defer net.Close()
	n, err := Start(context.Background(), Config{
		DataDir:          b.TempDir(),
		Sim:              net,
		Devices:          []device.Backend{sim},
		CoordinatorAfter: time.Millisecond,
		Executor:         executor.Config{Isolation: executor.IsolationProcess},
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Owner:            testOwner(0),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	b.Run("advertise", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := n.do(ctx, func() { n.advertise(n.mk.Ad()) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As every card change is: its states differ from those last
	// published, and the advertiser is handed the supply.
	b.Run("advertise-changed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := n.do(ctx, func() {
				n.publishedStates = nil
				n.advertise(n.mk.Ad())
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("modelOf", func(b *testing.B) {
		b.ReportAllocs()
		cards := n.devices.Cards()
		card := []string{cards[len(cards)-1].ID} // the last: the worst case of a scan
		for b.Loop() {
			if m := n.modelOf(card); m == "unknown" {
				b.Fatalf("no model for card %s", card[0])
			}
		}
	})
}
