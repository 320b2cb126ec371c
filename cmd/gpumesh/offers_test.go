package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

func sampleOffers() []api.Offer {
	return []api.Offer{
		{Node: nodeA, Region: "cn-east", Model: "h100-sxm-80g", Vendor: "nvidia", MemoryMiB: 81920, ComputeUnits: 3.17, Free: 6, Total: 8,
			PriceCNY: 22.5, PricePerCUCNY: 22.5 / 3.17, Reliability: api.Reliability{MTBFSeconds: (720 * time.Hour).Seconds(), UptimeSeconds: 3*3600 + 720}},
		{Node: nodeB, Self: true, Region: "cn-south", Model: "rtx4090-48g", Vendor: "nvidia", MemoryMiB: 49152, ComputeUnits: 0.53, Free: 1, Total: 2,
			PriceCNY: 3, PricePerCUCNY: 3 / 0.53, Reliability: api.Reliability{UptimeSeconds: 720,
				Seen: &api.Seen{Lost: 1, Ended: 3, MTBFSeconds: 5 * 3600}}},
		{Node: "12D3KooWbusybusybusybusybusybusybusybusybusybusyxx", Model: "rtx4090-48g", Vendor: "nvidia", MemoryMiB: 49152, ComputeUnits: 0.53, Free: 0, Total: 4, PriceCNY: 2},
		{Node: "12D3KooWoddoddoddoddoddoddoddoddoddoddoddoddoddxx", Model: "x-mystery-32g", Vendor: "nvidia", MemoryMiB: 32768, Free: 3, Total: 3, PriceCNY: 40},
	}
}

func TestOffersTable(t *testing.T) {
	n := newFakeNode(t)
	n.b.SetOffers(sampleOffers())
	code, out, errOut := n.run("offers")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	rows := table(out)
	if strings.Join(rows[0], "|") != "MODEL|FREE|MEMORY|CU|CNY/CARD-H|CNY/CU-H|RELIABILITY|REGION|NODE" {
		t.Fatalf("header %q", rows[0])
	}
	want := [][]string{ // cheapest card-hour first; the busy offer left out
		{"rtx4090-48g", "1/2", "48 GiB", "0.53", "3.00", "5.66", "MTBF ?, up 12m; here 1 of 4 lost, MTBF 5h", "cn-south", "12*bbbbbb (self)"},
		{"h100-sxm-80g", "6/8", "80 GiB", "3.17", "22.50", "7.10", "MTBF 30d0h, up 3h12m", "cn-east", "12*aaaaaa"},
		{"x-mystery-32g", "3/3", "32 GiB", "?", "40.00", "-", "MTBF ?, up 0s", "-", "12*doddxx"},
	}
	if len(rows) != len(want)+1 {
		t.Fatalf("%d rows:\n%s", len(rows), out)
	}
	for i, w := range want {
		if strings.Join(rows[i+1], "|") != strings.Join(w, "|") {
			t.Errorf("row %d = %q\nwant    %q", i+1, rows[i+1], w)
		}
	}
	if errOut != "gpumesh: 1 more matching offer has no free card (4 cards busy)\n" {
		t.Errorf("stderr %q", errOut)
	}

	// Filters and order reach the node as query parameters.
	code, out, _ = n.run("offers", "--model", "4090", "--min-mem", "48GiB", "--sort", "cu-price")
	if rows := table(out); code != 0 || len(rows) != 2 || rows[1][0] != "rtx4090-48g" {
		t.Errorf("--model 4090 --min-mem 48GiB: exit %d\n%s", code, out)
	}
	code, out, _ = n.run("offers", "--sort", "reliability")
	if rows := table(out); code != 0 || len(rows) != 4 || rows[1][0] != "h100-sxm-80g" || rows[2][0] != "rtx4090-48g" {
		t.Errorf("--sort reliability: want the H100 (720h) before the café (5h seen): exit %d\n%s", code, out)
	}
	code, out, errOut = n.run("offers", "--region", "cn-north")
	if code != 0 || len(table(out)) != 1 || errOut != "gpumesh: no offer matches\n" {
		t.Errorf("no match: exit %d, %q, stderr %q", code, out, errOut)
	}
	code, out, _ = n.run("offers", "--max-price", "25", "--json")
	var list api.OfferList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Offers) != 2 || list.BusyOffers != 1 || list.BusyCards != 4 {
		t.Errorf("--json: exit %d\n%s", code, out)
	}
}

func TestOffersBadFlags(t *testing.T) {
	n := newFakeNode(t)
	n.b.SetOffers(sampleOffers())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"offers", "--min-mem", "lots"}, `--min-mem: "lots": want a size such as 24GiB`},
		{[]string{"offers", "--max-price", "0"}, "--max-price: want a price in CNY per card-hour above 0, got 0"},
		{[]string{"offers", "--max-price", "-3"}, "--max-price: want a price"},
		{[]string{"offers", "--sort", "speed"}, `--sort: sort "speed": want price, cu-price or reliability`},
		{[]string{"offers", "--model", "h100-["}, `--model: model pattern "h100-["`},
		{[]string{"offers", "h100"}, "unknown command"},
	} {
		code, out, errOut := n.run(tc.args...)
		if code != exitUsage || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want exit 2 and nothing printed", tc.args, code, out)
		}
		oneLineErr(t, strings.Join(tc.args, " "), errOut, tc.want)
	}
}
