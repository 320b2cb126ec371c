package device

import (
	"strings"
	"testing"
)

func TestEmbeddedCatalogHasEveryModel(t *testing.T) {
	c := DefaultCatalog()
	want := []string{"rtx4090-24g", "rtx4090-48g", "rtx5090-32g", "h20-96g", "h20-141g", "h800-80g",
		"h100-sxm-80g", "h100-pcie-80g", "h200-141g", "rtxpro6000-96g", "rtxpro6000d-84g", "a100-80g",
		"a100-40g", "a800-80g", "a800-40g", "l20-48g", "l40-48g", "l40s-48g", "mtt-s4000-48g",
		"hygon-bw1000-64g", "kunlun-p800-96g", "ascend-910b-64g", "mi300x-192g"}
	if got := c.Keys(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keys = %v\nwant  %v", got, want)
	}
	a100, _ := c.Lookup("a100-80g")
	if a100.ComputeUnits != 1.0 {
		t.Errorf("a100 compute units = %v, want 1.0", a100.ComputeUnits)
	}
	h100, _ := c.Lookup("h100-sxm-80g")
	if h100.ComputeUnits != 3.17 || h100.ListPriceCNY != 22.50 {
		t.Errorf("h100 = %+v", h100)
	}
	bw, _ := c.Lookup("hygon-bw1000-64g")
	if bw.ComputeUnits != 0 || bw.BandwidthGBs != 0 {
		t.Errorf("unpublished figures must read as 0 (unknown): %+v", bw)
	}
}

func TestMatch(t *testing.T) {
	c := DefaultCatalog()
	cases := []struct {
		name   string
		memMiB uint64
		want   string // "" = no match
	}{
		{"NVIDIA GeForce RTX 4090", 24564, "rtx4090-24g"},
		{"NVIDIA GeForce RTX 4090", 49140, "rtx4090-48g"},
		{"NVIDIA GeForce RTX 5090", 32607, "rtx5090-32g"},
		{"NVIDIA H100 80GB HBM3", 81559, "h100-sxm-80g"},
		{"NVIDIA H100 PCIe", 81559, "h100-pcie-80g"},
		{"NVIDIA H200", 143771, "h200-141g"},
		{"NVIDIA H200 NVL", 143771, "h200-141g"},
		{"NVIDIA H20", 97871, "h20-96g"},
		{"NVIDIA H20", 143771, "h20-141g"},
		{"NVIDIA H800", 81559, "h800-80g"},
		{"NVIDIA A100-SXM4-80GB", 81920, "a100-80g"},
		{"NVIDIA A100-SXM4-40GB", 40960, "a100-40g"},
		{"NVIDIA A100 80GB PCIe", 81920, "a100-80g"},
		{"NVIDIA A800 80GB PCIe", 81920, "a800-80g"},
		{"NVIDIA L40S", 46068, "l40s-48g"},
		{"NVIDIA L40", 46068, "l40-48g"},
		{"NVIDIA L20", 46068, "l20-48g"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "rtxpro6000-96g"},
		{"NVIDIA RTX PRO 6000D", 86016, "rtxpro6000d-84g"},
		{"MTT S4000", 49152, "mtt-s4000-48g"},
		{"BW200, UBB BW1000", 65536, "hygon-bw1000-64g"},
		{"P800", 98304, "kunlun-p800-96g"},
		{"Ascend 910B3", 65536, "ascend-910b-64g"},
		{"AMD Instinct MI300X", 196592, "mi300x-192g"},
		{"NVIDIA GeForce RTX 4090", 0, "rtx4090-24g"},
		{"NVIDIA Tesla T4", 15360, ""},
		{"NVIDIA GeForce RTX 4090", 8192, ""}, // no bucket near 8 GiB
	}
	for _, tc := range cases {
		m, ok := c.Match(tc.name, tc.memMiB)
		if got := map[bool]string{true: m.Key, false: ""}[ok]; got != tc.want {
			t.Errorf("Match(%q, %d) = %q, want %q", tc.name, tc.memMiB, got, tc.want)
		}
	}
}

func TestResolveUnknownCard(t *testing.T) {
	c := DefaultCatalog()
	card := Card{Vendor: VendorNVIDIA, Name: "NVIDIA Tesla T4", MemoryMiB: 15360, ComputeUnits: 9}
	c.Resolve(&card)
	if card.Known || card.Model != "x-tesla-t4-15g" || card.ComputeUnits != 0 || !IsDerivedKey(card.Model) {
		t.Fatalf("unknown card resolved to %+v", card)
	}
	known := Card{Name: "NVIDIA H200", MemoryMiB: 143771}
	c.Resolve(&known)
	if !known.Known || known.Model != "h200-141g" || known.Vendor != VendorNVIDIA || known.ComputeUnits != 3.17 {
		t.Fatalf("known card resolved to %+v", known)
	}
}

func TestClosest(t *testing.T) {
	c := DefaultCatalog()
	if got := c.Closest("h100", 2); got[0] != "h100-sxm-80g" && got[0] != "h100-pcie-80g" {
		t.Errorf("Closest(h100) = %v", got)
	}
	if got := c.Closest("rtx4090-24", 1); got[0] != "rtx4090-24g" {
		t.Errorf("Closest(rtx4090-24) = %v", got)
	}
}

func TestDefaultPrice(t *testing.T) {
	c := DefaultCatalog()
	for key, want := range map[string]float64{
		"h100-sxm-80g":     22.50, // list price
		"a800-80g":         11.40, // 1.0 CU × reference
		"hygon-bw1000-64g": 8,     // memory floor
	} {
		m, _ := c.Lookup(key)
		if got := m.DefaultPriceCNY(); got != want {
			t.Errorf("%s default price = %v, want %v", key, got, want)
		}
	}
}

func TestCanonicalBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:C1:00.0":     "0000:c1:00.0",
		"0000:c1:00.0":         "0000:c1:00.0",
		"c1:00.0":              "0000:c1:00.0",
		"00000001:1A:00.1\x00": "0001:1a:00.1",
		"garbage":              "garbage",
	} {
		if got := CanonicalBusID(in); got != want {
			t.Errorf("CanonicalBusID(%q) = %q, want %q", in, got, want)
		}
	}
}
