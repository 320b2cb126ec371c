package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// offerBackend serves a fixed list of offers and nothing else.
type offerBackend struct {
	backendless
	offers []Offer
	calls  atomic.Int32
}

func (b *offerBackend) Offers(context.Context) ([]Offer, error) {
	b.calls.Add(1)
	return b.offers, nil
}

func sampleOffers() []Offer {
	return []Offer{
		{Node: "n-h100", Region: "cn-east", Model: "h100-sxm-80g", Vendor: "nvidia", MemoryMiB: 81920, ComputeUnits: 3.17, Free: 6, Total: 8,
			PriceCNY: 22.5, PricePerCUCNY: 22.5 / 3.17, Reliability: Reliability{MTBFSeconds: 720 * 3600}},
		{Node: "n-cafe", Region: "cn-south", Model: "rtx4090-48g", Vendor: "nvidia", MemoryMiB: 49152, ComputeUnits: 0.53, Free: 2, Total: 2,
			PriceCNY: 3, PricePerCUCNY: 3 / 0.53, Reliability: Reliability{MTBFSeconds: 8 * 3600, Seen: &Seen{Lost: 2, Ended: 3, MTBFSeconds: 2 * 3600}}},
		{Node: "n-home", Region: "cn-east", Model: "rtx4090-24g", Vendor: "nvidia", MemoryMiB: 24576, ComputeUnits: 0.53, Free: 1, Total: 1,
			PriceCNY: 1.3, PricePerCUCNY: 1.3 / 0.53},
		{Node: "n-busy", Region: "cn-east", Model: "rtx4090-48g", Vendor: "nvidia", MemoryMiB: 49152, ComputeUnits: 0.53, Free: 0, Total: 4,
			PriceCNY: 2.5, PricePerCUCNY: 2.5 / 0.53},
		{Node: "n-odd", Model: "x-mystery-32g", Vendor: "nvidia", MemoryMiB: 32768, Free: 3, Total: 3, PriceCNY: 4},
	}
}

func getOffers(t *testing.T, srv *httptest.Server, query string) (int, OfferList, Error) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/v1/offers" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var list OfferList
	var e Error
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("GET /v1/offers%s: %v\n%s", query, err, body)
		}
	} else if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("GET /v1/offers%s: %d %q is not a JSON error", query, resp.StatusCode, body)
	}
	return resp.StatusCode, list, e
}

func nodesOf(l OfferList) string {
	var ids []string
	for _, o := range l.Offers {
		ids = append(ids, o.Node)
	}
	return strings.Join(ids, ",")
}

func TestOffersFilterAndSort(t *testing.T) {
	b := &offerBackend{offers: sampleOffers()}
	srv := httptest.NewServer(Handler(Config{}, b, nil))
	defer srv.Close()
	for _, tc := range []struct {
		query, want string
		busyOffers  int
		busyCards   int
	}{
		// Cheapest card-hour first; the offer with no free card is left
		// out and counted.
		{"", "n-home,n-cafe,n-odd,n-h100", 1, 4},
		{"?model=4090", "n-home,n-cafe", 1, 4},
		{"?model=RTX4090-48G", "n-cafe", 1, 4},
		{"?model=h100-*", "n-h100", 0, 0},
		{"?model=a100", "", 0, 0},
		{"?min_mem_mib=40000", "n-cafe,n-h100", 1, 4},
		{"?region=CN-EAST", "n-home,n-h100", 1, 4},
		{"?max_price=3", "n-home,n-cafe", 1, 4},
		{"?max_price=2", "n-home", 0, 0},
		// Per compute-unit hour: 1.3/0.53 = 2.45, 3/0.53 = 5.66,
		// 22.5/3.17 = 7.10; unknown compute units last.
		{"?sort=cu-price", "n-home,n-cafe,n-h100,n-odd", 1, 4},
		// Longest MTBF first: the H100's 720h, the café's 8h lowered to
		// the 2h this node saw; none advertised last, by price.
		{"?sort=reliability", "n-h100,n-cafe,n-home,n-odd", 1, 4},
		{"?model=4090&region=cn-east&sort=reliability", "n-home", 1, 4},
	} {
		code, list, e := getOffers(t, srv, tc.query)
		if code != 200 {
			t.Errorf("%s: %d %s", tc.query, code, e.Error)
			continue
		}
		if got := nodesOf(list); got != tc.want || list.BusyOffers != tc.busyOffers || list.BusyCards != tc.busyCards {
			t.Errorf("%s: offers %q, busy %d offers / %d cards; want %q, %d / %d", tc.query, got, list.BusyOffers, list.BusyCards, tc.want, tc.busyOffers, tc.busyCards)
		}
	}
	// An empty answer is an empty array, never null.
	resp, err := http.Get(srv.URL + "/v1/offers?model=a100")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"offers": []`) {
		t.Errorf("no match: %s, want an empty offers array", body)
	}
}

func TestOffersRefuseBadQueries(t *testing.T) {
	b := &offerBackend{offers: sampleOffers()}
	srv := httptest.NewServer(Handler(Config{}, b, nil))
	defer srv.Close()
	for _, tc := range []struct{ query, field, says string }{
		{"?model=h100-[", "model", `model pattern "h100-["`},
		{"?min_mem_mib=48GiB", "min_mem_mib", `min_mem_mib "48GiB": want a whole number of MiB`},
		{"?min_mem_mib=-1", "min_mem_mib", "want a whole number"},
		{"?max_price=0", "max_price", `max_price "0": want a price in CNY per card-hour above 0`},
		{"?max_price=NaN", "max_price", "above 0"},
		{"?max_price=cheap", "max_price", "above 0"},
		{"?sort=speed", "sort", `sort "speed": want price, cu-price or reliability`},
		{"?sort=price&sort=cu-price", "sort", "sort given 2 times"},
		{"?min_mem=48GiB", "min_mem", `unknown parameter "min_mem"`},
	} {
		code, _, e := getOffers(t, srv, tc.query)
		if code != 400 || e.Field != tc.field || !strings.Contains(e.Error, tc.says) {
			t.Errorf("%s: %d %+v, want 400 on %s saying %q", tc.query, code, e, tc.field, tc.says)
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Errorf("a bad query reached the backend %d times", n)
	}
	// A backend that lists no offers answers 404.
	srv2 := httptest.NewServer(Handler(Config{}, backendless{}, nil))
	defer srv2.Close()
	if code, _, e := getOffers(t, srv2, ""); code != 404 || !strings.Contains(e.Error, "lists no offers") {
		t.Errorf("backend without offers: %d %+v", code, e)
	}
}

func TestOfferQueryValuesRoundTrip(t *testing.T) {
	q := OfferQuery{Model: "h100-*", MinMemoryMiB: 49152, Region: "cn-east", MaxPriceCNY: 2.75, Sort: SortReliability}
	back, err := ParseOfferQuery(q.Values())
	if err != nil || back != q {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, q)
	}
	if v := (OfferQuery{}).Values(); len(v) != 0 {
		t.Errorf("the zero query sends %v", v)
	}
}
