package market_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

func TestDbg(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 1, TickEvery: 20 * time.Millisecond})
	buildMesh(h, 10, 4, 2)
	h.Trace = func(s string) { fmt.Println(h.Now.Format("05.000"), s) }
	for i := 0; i < 2; i++ {
		spec := market.JobSpec{ID: fmt.Sprintf("job%05d", i), Cards: 1, MaxPriceCNY: 40, Command: []string{"run"}}
		h.Submit(spec)
	}
	h.RunFor(300 * time.Millisecond)
	for i := 0; i < 2; i++ {
		r, _ := h.Job(fmt.Sprintf("job%05d", i))
		fmt.Println(r.State, r.Explanation)
	}
}
