package mesh

import (
	"testing"
	"time"
)

func TestSimThreeNodesSeeEachOtherWithMeta(t *testing.T) {
	sim := NewSimNetwork(SimOptions{})
	defer sim.Close()
	nodes := simCluster(t, sim, 3, func(i int) Config {
		return Config{Meta: Meta{Region: "r" + string(rune('a'+i)), Cards: 8, FreeCards: i, Models: []string{"h100-sxm-80g"}}}
	})
	waitFor(t, 5*time.Second, "all alive", func() bool { return allSee(nodes, StateAlive) })
	for _, a := range nodes {
		for i, b := range nodes {
			mem, _ := a.Member(b.ID())
			if mem.Region != "r"+string(rune('a'+i)) || mem.Cards != 8 || mem.FreeCards != i || len(mem.Models) != 1 || mem.Models[0] != "h100-sxm-80g" {
				t.Errorf("%s sees %s with meta %+v", a.ID().ShortString(), b.ID().ShortString(), mem.Meta)
			}
			if len(mem.Addrs) == 0 {
				t.Errorf("%s sees %s without addresses", a.ID().ShortString(), b.ID().ShortString())
			}
			if mem.Self != (a == b) {
				t.Errorf("Self = %v for %s in %s's view", mem.Self, b.ID().ShortString(), a.ID().ShortString())
			}
		}
	}
	t.Log(describe(nodes))
}
