package market

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestSpreadOver(t *testing.T) {
	// Items in rank order, by region; "!" marks an avoided item.
	cases := []struct {
		name    string
		regions []string
		want    int
		used    []string
		picked  []int
	}{
		{"one region: the best, as without spreading", []string{"e", "e", "e", "e"}, 3, nil, []int{0, 1, 2}},
		{"three regions: the best of each", []string{"e", "e", "e", "w", "n"}, 3, nil, []int{0, 3, 4}},
		{"two regions for three: the best of each, then the best left", []string{"e", "e", "w", "e"}, 3, nil, []int{0, 1, 2}},
		{"a region with a replica comes after the others", []string{"e", "w", "n"}, 1, []string{"e"}, []int{1}},
		{"every region has one: the best", []string{"e", "w"}, 1, []string{"e", "w"}, []int{0}},
		{"no region is never preferred", []string{"", "", "w"}, 2, nil, []int{0, 2}},
		{"an avoided node is not preferred for its region", []string{"e", "w!", "n"}, 2, nil, []int{0, 2}},
		{"but fills up when nothing else will do", []string{"e", "w!"}, 2, nil, []int{0, 1}},
		{"fewer items than wanted: all of them", []string{"e", "w"}, 3, nil, []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			used := map[string]bool{}
			for _, r := range c.used {
				used[r] = true
			}
			region := func(i int) string { r, _ := cutAvoid(c.regions[i]); return r }
			avoided := func(i int) bool { _, a := cutAvoid(c.regions[i]); return a }
			picked, rest := spreadOver(len(c.regions), c.want, region, avoided, used)
			if !slices.Equal(picked, c.picked) {
				t.Errorf("picked %v, want %v", picked, c.picked)
			}
			all := slices.Sorted(slices.Values(append(slices.Clone(picked), rest...)))
			if len(all) != len(c.regions) || !slices.IsSorted(rest) {
				t.Errorf("picked %v and rest %v do not split the %d items in rank order", picked, rest, len(c.regions))
			}
			if len(used) != len(c.used) {
				t.Errorf("spreadOver changed used: %v", used)
			}
		})
	}
}

func cutAvoid(s string) (string, bool) {
	r, avoided := strings.CutSuffix(s, "!")
	return r, avoided
}

// Clearing a service's replicas spreads them over the regions that bid:
// here the three cheapest bids are all in east, and west and north bid
// dearer. The uniform price is then the dearest winner's (no winner is
// paid below its bid, and none more than a loser of its own region would
// have set), and the east bids passed over say why.
func TestClearSpreadsReplicasOverRegions(t *testing.T) {
	lot := func(node, region string, price float64) Lot {
		l := lotOf(node, 0, card("a100-80g", price))
		l.Region = region
		return l
	}
	lots := []Lot{
		lot("e1", "east", 5), lot("e2", "east", 5.5), lot("e3", "east", 6),
		lot("w1", "west", 8), lot("n1", "north", 9), lot("x1", "", 4),
	}
	need := Need{Slots: 3, PerSlot: 1}
	winners := func(cc clearCase) []string {
		t.Helper()
		res := clearBids(cc.in)
		checkClearing(t, cc, res)
		var out []string
		for _, w := range res.winners {
			out = append(out, cc.lots[w.lot].Node)
		}
		slices.Sort(out)
		return out
	}

	// Without spreading (not a service): the three cheapest.
	cc := newClearCase(lots, need, Filter{MaxPriceCNY: 20}, 0, nil, 1)
	if got := winners(cc); !slices.Equal(got, []string{"e1", "e2", "x1"}) {
		t.Fatalf("unspread winners %v", got)
	}

	// Spread, nothing placed yet: one per region, best first.
	cc = newClearCase(lots, need, Filter{MaxPriceCNY: 20}, 0, nil, 1)
	cc.in.spread = map[string]bool{}
	res := clearBids(cc.in)
	checkClearing(t, cc, res)
	if got := winners(cc); !slices.Equal(got, []string{"e1", "n1", "w1"}) {
		t.Fatalf("spread winners %v, want e1 n1 w1", got)
	}
	if res.priceCU != 9 {
		t.Errorf("clearing price %v, want 9 (the dearest winner's)", res.priceCU)
	}
	var out Explanation
	cc.in.explain.finish(&out, 100)
	reasons := map[string]Reason{}
	for _, e := range out.Entries {
		reasons[e.Node] = e.Reason
	}
	for node, want := range map[string]Reason{"e1": ReasonWon, "w1": ReasonWon, "n1": ReasonWon, "x1": ReasonRegion, "e2": ReasonRegion, "e3": ReasonRegion} {
		if reasons[node] != want {
			t.Errorf("%s explained as %q, want %q: %s", node, reasons[node], want, out.String())
		}
	}

	// A replacement for the west replica: east and north hold one.
	cc = newClearCase(lots, Need{Slots: 1, PerSlot: 1}, Filter{MaxPriceCNY: 20}, 0, map[string]bool{"e1": true, "n1": true}, 1)
	cc.in.spread = map[string]bool{"east": true, "north": true}
	if got := winners(cc); !slices.Equal(got, []string{"w1"}) {
		t.Fatalf("replacement %v, want w1", got)
	}

	// Only east bids: three east nodes, the region there is.
	east := lots[:3]
	cc = newClearCase(east, need, Filter{MaxPriceCNY: 20}, 0, nil, 1)
	cc.in.spread = map[string]bool{}
	if got := winners(cc); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("east-only winners %v", got)
	}

	// The same input clears the same way every time.
	for seed := uint64(0); seed < 16; seed++ {
		cc = newClearCase(lots, need, Filter{MaxPriceCNY: 20}, 0, nil, seed)
		cc.in.spread = map[string]bool{}
		if a, b := fmt.Sprint(winners(cc)), fmt.Sprint(winners(cc)); a != b || a != "[e1 n1 w1]" {
			t.Fatalf("seed %d: %s then %s", seed, a, b)
		}
	}
}
