package device

import (
	"context"
	"reflect"
	"testing"
)

func TestVisibleEnv(t *testing.T) {
	nv := func(i int, uuid string) Card { return Card{ID: uuid, UUID: uuid, Vendor: VendorNVIDIA, Index: i} }
	other := func(v Vendor, i int) Card { return Card{ID: string(v) + string(rune('a'+i)), Vendor: v, Index: i} }
	inventory := []Card{
		nv(0, "GPU-aaaa"), nv(1, "GPU-bbbb"), nv(2, "GPU-cccc"),
		other(VendorAMD, 0), other(VendorAMD, 1),
		other(VendorHygon, 0), other(VendorHuawei, 0), other(VendorMThreads, 0), other(VendorKunlunxin, 0),
	}
	cases := []struct {
		name  string
		cards []Card
		inv   []Card
		want  []string
	}{
		{"two NVIDIA cards by UUID", []Card{inventory[2], inventory[0]}, nil,
			[]string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=GPU-cccc,GPU-aaaa"}},
		{"each vendor its variable", []Card{inventory[4], inventory[5], inventory[6], inventory[7], inventory[8]}, nil,
			[]string{"ASCEND_RT_VISIBLE_DEVICES=0", "HIP_VISIBLE_DEVICES=0", "MUSA_VISIBLE_DEVICES=0",
				"ROCR_VISIBLE_DEVICES=1", "XPU_VISIBLE_DEVICES=0"}},
		{"other vendors on the node are hidden", []Card{inventory[3]}, inventory,
			[]string{"ASCEND_RT_VISIBLE_DEVICES=-1", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=-1",
				"HIP_VISIBLE_DEVICES=-1", "MUSA_VISIBLE_DEVICES=-1", "ROCR_VISIBLE_DEVICES=0", "XPU_VISIBLE_DEVICES=-1"}},
		{"a card listed twice counts once", []Card{inventory[1], inventory[1]}, nil,
			[]string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=GPU-bbbb"}},
		{"NVIDIA without UUID falls back to index", []Card{{ID: "nvidia-index-3", Vendor: VendorNVIDIA, Index: 3}}, nil,
			[]string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=3"}},
		{"unknown vendor gets nothing", []Card{{ID: "x", Vendor: "acme"}}, nil, nil},
		{"no cards, nothing on the node", nil, nil, nil},
	}
	for _, tc := range cases {
		if got := VisibleEnv(tc.cards, tc.inv); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestVisibleEnvForSimulatedCards(t *testing.T) {
	cards, _ := mustSim(t, "h100-sxm-80g:2,mtt-s4000-48g:2", "v").Cards(context.Background())
	got := VisibleEnv([]Card{cards[1], cards[3]}, cards)
	want := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=" + cards[1].UUID, "MUSA_VISIBLE_DEVICES=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
