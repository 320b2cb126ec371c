package sim

import (
	"slices"
	"testing"
)

func TestPlanSuppliersFollowsTheMix(t *testing.T) {
	plan, err := PlanSuppliers(300, DefaultMix(), 7)
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[Tier]int{}
	class := 0
	names := map[string]bool{}
	for _, s := range plan {
		tiers[s.Tier]++
		if names[s.Name] {
			t.Fatalf("name %s twice", s.Name)
		}
		names[s.Name] = true
		switch s.Tier {
		case TierIDC:
			if s.Cards != 8 || !s.Coordinates || s.PriceCNY <= 0 {
				t.Errorf("IDC node %+v: want 8 cards, coordinating, priced", s)
			}
			if slices.Contains([]string{"h100-sxm-80g", "h200-141g", "a100-80g", "a800-80g", "h20-96g", "kunlun-p800-96g"}, s.Model) {
				class += s.Cards
			}
		case TierCafe:
			if s.Cards < 1 || s.Cards > 2 || s.Coordinates {
				t.Errorf("café node %+v", s)
			}
		case TierHome:
			if s.Cards != 1 || s.Coordinates {
				t.Errorf("home node %+v", s)
			}
		}
	}
	if tiers[TierIDC] != 150 || tiers[TierCafe] != 75 || tiers[TierHome] != 75 {
		t.Errorf("tiers %v, want 150/75/75", tiers)
	}
	if class < 1000 {
		t.Errorf("%d cards of the training class on 300 nodes, want at least 1000", class)
	}
	if !plan[0].Coordinates {
		t.Error("the gateway (first supplier) does not coordinate")
	}
	again, _ := PlanSuppliers(300, DefaultMix(), 7)
	if !slices.Equal(plan, again) {
		t.Error("the same seed made another plan")
	}
	other, _ := PlanSuppliers(300, DefaultMix(), 8)
	if slices.Equal(plan, other) {
		t.Error("another seed made the same plan")
	}
}

func TestPlanSuppliersPricesByTier(t *testing.T) {
	plan, _ := PlanSuppliers(40, DefaultMix(), 1)
	for _, s := range plan {
		if s.Model == "rtx4090-24g" {
			want := map[Tier]float64{TierCafe: 1.58, TierHome: 1.29}[s.Tier]
			if s.PriceCNY != want {
				t.Errorf("%s: RTX 4090 24G at %.2f, want %.2f (list 1.98 × tier factor)", s.Name, s.PriceCNY, want)
			}
		}
	}
}

func TestPlanSuppliersRefusesBadInput(t *testing.T) {
	if _, err := PlanSuppliers(0, DefaultMix(), 1); err == nil {
		t.Error("0 nodes accepted")
	}
	bad := DefaultMix()
	bad[1].Models = []ModelWeight{{"no-such-card", 1}}
	if _, err := PlanSuppliers(10, bad, 1); err == nil {
		t.Error("an unknown model accepted")
	}
	onlyHome := []TierProfile{DefaultMix()[2]}
	if _, err := PlanSuppliers(10, onlyHome, 1); err == nil {
		t.Error("a mesh without coordinators accepted")
	}
}

func TestWithControllers(t *testing.T) {
	plan, _ := PlanSuppliers(20, DefaultMix(), 1)
	withCtl := WithControllers(plan, 3)
	if len(withCtl) != 23 {
		t.Fatalf("%d nodes", len(withCtl))
	}
	for i, s := range withCtl {
		if (i < 3) != s.Coordinates || (i < 3) != (s.Cards == 0) {
			t.Errorf("node %d %+v: want only the 3 controllers, without cards, to coordinate", i, s)
		}
	}
	if len(withCtl[0].SimSpec()) != 0 || withCtl[3].SimSpec().Total() != withCtl[3].Cards {
		t.Error("sim specs")
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		n    int
		w    []float64
		want []int
	}{
		{10, []float64{1, 1, 1}, []int{4, 3, 3}},
		{50, []float64{0.5, 0.25, 0.25}, []int{25, 13, 12}},
		{1, []float64{0.5, 0.25, 0.25}, []int{1, 0, 0}},
	} {
		got := apportion(tc.n, tc.w)
		sum := 0
		for _, v := range got {
			sum += v
		}
		if !slices.Equal(got, tc.want) || sum != tc.n {
			t.Errorf("apportion(%d, %v) = %v, want %v", tc.n, tc.w, got, tc.want)
		}
	}
}
