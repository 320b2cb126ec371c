package api

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Offer is one line of what the mesh sells, as this node's book of capacity
// ads holds it: one supplier's cards of one model, their price and how
// reliable the supplier is.
type Offer struct {
	// Node is the supplier's peer ID; Self marks this node's own cards.
	Node   string `json:"node"`
	Self   bool   `json:"self,omitempty"`
	Region string `json:"region,omitempty"`
	Model  string `json:"model"`
	Vendor string `json:"vendor"`
	// MemoryMiB is the smallest memory among the cards.
	MemoryMiB uint64 `json:"memory_mib"`
	// ComputeUnits is one card's dense BF16 TFLOPS / 312 (A100 = 1); 0
	// when the catalog does not know the model.
	ComputeUnits float64 `json:"compute_units"`
	// Free is the number of cards neither reserved nor busy; Total counts
	// every healthy card of the model on the node.
	Free  int `json:"free"`
	Total int `json:"total"`
	// PriceCNY is the asking price per card-hour; PricePerCUCNY the same
	// per compute-unit hour (PriceCNY / ComputeUnits), 0 when the compute
	// units are unknown.
	PriceCNY      float64     `json:"price_cny"`
	PricePerCUCNY float64     `json:"price_per_cu_cny"`
	Reliability   Reliability `json:"reliability"`
	// Simulated marks simulated cards (gpumesh node --sim): only jobs that
	// allow them (submit --allow-simulated) get them.
	Simulated bool `json:"simulated,omitempty"`
}

// Reliability is what a supplier says of how long it stays up, and what
// this node saw of it.
type Reliability struct {
	// MTBFSeconds is the supplier's advertised mean time between
	// departures; 0 when it advertises none.
	MTBFSeconds float64 `json:"mtbf_seconds"`
	// UptimeSeconds is the length of its current session, as it reports
	// it.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Seen is this node's own track record of the supplier, kept as a
	// coordinator of jobs that ran there; nil when it keeps none.
	Seen *Seen `json:"seen,omitempty"`
}

// Seen is a coordinator's track record of one supplier.
type Seen struct {
	// Lost and Ended count the attempts it saw end lost and cleanly.
	Lost  int `json:"lost"`
	Ended int `json:"ended"`
	// MTBFSeconds is the MTBF the record makes of the supplier; 0 when
	// it saw no loss.
	MTBFSeconds float64   `json:"mtbf_seconds"`
	LastLoss    time.Time `json:"last_loss,omitzero"`
}

// MTBF is the MTBF, in seconds, the auction weighs the supplier by, as far as
// this node knows: the advertised one, lowered to what the node saw; 0 when
// neither is known.
func (r Reliability) MTBF() float64 {
	m := r.MTBFSeconds
	if r.Seen != nil && r.Seen.MTBFSeconds > 0 && (m <= 0 || r.Seen.MTBFSeconds < m) {
		m = r.Seen.MTBFSeconds
	}
	return m
}

// OfferList is the body of GET /v1/offers: the offers with a free card that
// match the query, in its order, and how many more match with none free.
type OfferList struct {
	Offers []Offer `json:"offers"`
	// BusyOffers and BusyCards count the matching offers left out because
	// none of their cards is free, and their cards.
	BusyOffers int `json:"busy_offers"`
	BusyCards  int `json:"busy_cards"`
}

// OfferLister is implemented by a Backend that knows what the mesh sells.
// Without it GET /v1/offers answers 404.
type OfferLister interface {
	// Offers returns every offer of the node's book, in any order; the
	// API filters and sorts them (OfferQuery).
	Offers(ctx context.Context) ([]Offer, error)
}

// The orders of GET /v1/offers (OfferQuery.Sort).
const (
	SortPrice       = "price"       // cheapest card-hour first (the default)
	SortCUPrice     = "cu-price"    // cheapest compute-unit hour first; unknown compute units last
	SortReliability = "reliability" // longest MTBF first (Reliability.MTBF); unknown last
)

// maxOfferMemMiB bounds min_mem_mib: 1 PiB.
const maxOfferMemMiB = 1 << 30

// OfferQuery is the filter and order of GET /v1/offers, read from its query
// parameters by ParseOfferQuery. The zero value matches every offer and
// sorts by price.
type OfferQuery struct {
	// Model is a catalog key (h100-sxm-80g), a glob over keys (h100-*), or
	// part of a key (4090), case-insensitive; "" matches every model.
	// Parameter "model".
	Model string
	// MinMemoryMiB is the least memory a card must have (parameter
	// "min_mem_mib").
	MinMemoryMiB uint64
	// Region is the supplier's region, case-insensitive ("region").
	Region string
	// MaxPriceCNY is the highest price per card-hour; 0 means no bound
	// ("max_price").
	MaxPriceCNY float64
	// Sort is one of the Sort constants; "" is SortPrice ("sort").
	Sort string
}

// ParseOfferQuery reads the query parameters of GET /v1/offers. An unknown
// parameter or a bad value is an *HTTPError (400) naming it.
func ParseOfferQuery(v url.Values) (OfferQuery, error) {
	var q OfferQuery
	bad := func(field, format string, args ...any) error {
		return &HTTPError{Status: http.StatusBadRequest, Field: field, Err: fmt.Errorf(format, args...)}
	}
	for k, vals := range v {
		switch k {
		case "model", "min_mem_mib", "region", "max_price", "sort":
			if len(vals) > 1 {
				return q, bad(k, "%s given %d times: want it once", k, len(vals))
			}
		default:
			return q, bad(k, "unknown parameter %q: want model, min_mem_mib, region, max_price or sort", k)
		}
	}
	q.Model = strings.TrimSpace(v.Get("model"))
	if strings.ContainsAny(q.Model, "*?[") {
		if _, err := path.Match(q.Model, ""); err != nil {
			return q, bad("model", "model pattern %q: %v", q.Model, err)
		}
	}
	if s := v.Get("min_mem_mib"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > maxOfferMemMiB {
			return q, bad("min_mem_mib", "min_mem_mib %q: want a whole number of MiB from 0 to %d", s, maxOfferMemMiB)
		}
		q.MinMemoryMiB = n
	}
	q.Region = strings.TrimSpace(v.Get("region"))
	if s := v.Get("max_price"); s != "" {
		p, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) || p <= 0 {
			return q, bad("max_price", "max_price %q: want a price in CNY per card-hour above 0", s)
		}
		q.MaxPriceCNY = p
	}
	switch q.Sort = v.Get("sort"); q.Sort {
	case "", SortPrice, SortCUPrice, SortReliability:
	default:
		return q, bad("sort", "sort %q: want %s, %s or %s", q.Sort, SortPrice, SortCUPrice, SortReliability)
	}
	return q, nil
}

// Values is q as query parameters, for a client.
func (q OfferQuery) Values() url.Values {
	v := url.Values{}
	if q.Model != "" {
		v.Set("model", q.Model)
	}
	if q.MinMemoryMiB > 0 {
		v.Set("min_mem_mib", strconv.FormatUint(q.MinMemoryMiB, 10))
	}
	if q.Region != "" {
		v.Set("region", q.Region)
	}
	if q.MaxPriceCNY > 0 {
		v.Set("max_price", strconv.FormatFloat(q.MaxPriceCNY, 'f', -1, 64))
	}
	if q.Sort != "" {
		v.Set("sort", q.Sort)
	}
	return v
}

// Matches reports whether o passes q's filters (whatever its free cards).
func (q OfferQuery) Matches(o Offer) bool {
	switch {
	case q.MinMemoryMiB > 0 && o.MemoryMiB < q.MinMemoryMiB:
		return false
	case q.Region != "" && !strings.EqualFold(q.Region, o.Region):
		return false
	case q.MaxPriceCNY > 0 && o.PriceCNY > q.MaxPriceCNY:
		return false
	}
	return q.modelMatches(o.Model)
}

func (q OfferQuery) modelMatches(key string) bool {
	if q.Model == "" {
		return true
	}
	p, k := strings.ToLower(q.Model), strings.ToLower(key)
	if strings.ContainsAny(p, "*?[") {
		ok, _ := path.Match(p, k)
		return ok
	}
	return strings.Contains(k, p)
}

// Apply filters offers by q, keeps those with a free card in q's order
// (then by model and node, so the order is stable) and counts the rest.
func (q OfferQuery) Apply(offers []Offer) OfferList {
	list := OfferList{Offers: []Offer{}}
	for _, o := range offers {
		if !q.Matches(o) {
			continue
		}
		if o.Free <= 0 {
			list.BusyOffers++
			list.BusyCards += o.Total
			continue
		}
		list.Offers = append(list.Offers, o)
	}
	// unknownLast orders known values (> 0) before unknown ones (0).
	unknownLast := func(a, b float64, asc bool) int {
		switch {
		case a <= 0 && b <= 0:
			return 0
		case a <= 0:
			return 1
		case b <= 0:
			return -1
		case asc:
			return cmp.Compare(a, b)
		}
		return cmp.Compare(b, a)
	}
	slices.SortFunc(list.Offers, func(a, b Offer) int {
		var c int
		switch q.Sort {
		case SortCUPrice:
			c = unknownLast(a.PricePerCUCNY, b.PricePerCUCNY, true)
		case SortReliability:
			c = unknownLast(a.Reliability.MTBF(), b.Reliability.MTBF(), false)
		}
		return cmp.Or(c, cmp.Compare(a.PriceCNY, b.PriceCNY), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Node, b.Node))
	})
	return list
}

func (h *handlers) offers(w http.ResponseWriter, r *http.Request) {
	ol, ok := h.b.(OfferLister)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node lists no offers"))
		return
	}
	q, err := ParseOfferQuery(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := ol.Offers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, q.Apply(all))
}
