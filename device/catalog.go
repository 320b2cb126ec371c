package device

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// catalogCSV is a copy of shared/data/gpu-catalog.csv: published specs and list
// prices of the card models in gpumesh's supply.
//
//go:embed catalog.csv
var catalogCSV string

// ReferencePriceCNYPerCU is the price of one compute unit for one hour used to
// estimate a price for a model with no published list price: the A100 80GB's
// list price (11.40 CNY per card-hour at 1.0 CU).
const ReferencePriceCNYPerCU = 11.40

// Model is one row of the catalog.
type Model struct {
	Key          string  `json:"key"` // "h100-sxm-80g"
	Vendor       Vendor  `json:"vendor"`
	NamePattern  string  `json:"name_pattern"` // words the raw device name contains
	MemoryGiB    uint64  `json:"memory_gib"`
	BF16TFLOPS   float64 `json:"bf16_tflops"`   // 0 = unpublished
	ComputeUnits float64 `json:"compute_units"` // BF16TFLOPS / 312; 0 = unknown
	BandwidthGBs float64 `json:"bandwidth_gbs"` // 0 = unpublished
	ListPriceCNY float64 `json:"list_price_cny"`
	Uncertain    bool    `json:"uncertain"` // a figure is marked "?" or "uncertain"
	Confidence   string  `json:"confidence"`
	patternWords []string
}

// DefaultPriceCNY is the price per card-hour a supplier asks for this model
// unless it sets its own: the list price where one is published, otherwise an
// estimate of ReferencePriceCNYPerCU per compute unit, otherwise 1 CNY per
// 8 GiB of memory (a floor for cards with no published compute figure).
func (m Model) DefaultPriceCNY() float64 {
	switch {
	case m.ListPriceCNY > 0:
		return m.ListPriceCNY
	case m.ComputeUnits > 0:
		return round2(m.ComputeUnits * ReferencePriceCNYPerCU)
	default:
		return round2(float64(m.MemoryGiB) / 8)
	}
}

// Catalog maps raw device names and memory sizes to model keys. It is
// immutable once built and safe for concurrent use.
type Catalog struct {
	models []Model
	byKey  map[string]int
}

// DefaultCatalog returns the catalog compiled into the binary: parsed
// once, on first use, and shared (a Catalog is immutable). Validating a
// spec without a catalog of its own asks for it, once per submission.
func DefaultCatalog() *Catalog { return defaultCatalog() }

var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := ParseCatalog(catalogCSV)
	if err != nil {
		// The embedded file is tested; a failure here is a build defect.
		panic(fmt.Sprintf("device: embedded catalog: %v", err))
	}
	return c
})

// ParseCatalog reads a catalog in the format of shared/data/gpu-catalog.csv:
// '#' comment lines, a header, then
// key,vendor,name_pattern,memory_gib,bf16_tflops,bandwidth_gbs,list_cny_per_card_hour,confidence.
// Numbers may be empty (unpublished) or end in '?' (uncertain); the last
// field is free prose and may contain commas.
func ParseCatalog(text string) (*Catalog, error) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			lines = append(lines, l)
		}
	}
	r := csv.NewReader(strings.NewReader(strings.Join(lines, "\n")))
	r.LazyQuotes = true    // the confidence column quotes names in prose
	r.FieldsPerRecord = -1 // and may hold commas: the tail is joined back
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if len(rows) == 0 || rows[0][0] != "key" {
		return nil, fmt.Errorf("catalog: missing header row starting with %q", "key")
	}
	c := &Catalog{byKey: map[string]int{}}
	for i, row := range rows[1:] {
		m, err := parseModelRow(row)
		if err != nil {
			return nil, fmt.Errorf("catalog row %d (%s): %w", i+1, row[0], err)
		}
		if _, dup := c.byKey[m.Key]; dup {
			return nil, fmt.Errorf("catalog row %d: duplicate key %q", i+1, m.Key)
		}
		c.byKey[m.Key] = len(c.models)
		c.models = append(c.models, m)
	}
	return c, nil
}

func parseModelRow(row []string) (Model, error) {
	if len(row) < 8 {
		return Model{}, fmt.Errorf("want 8 fields, got %d", len(row))
	}
	row = append(row[:7:7], strings.Join(row[7:], ","))
	m := Model{
		Key:         strings.TrimSpace(row[0]),
		Vendor:      Vendor(strings.TrimSpace(row[1])),
		NamePattern: strings.TrimSpace(row[2]),
		Confidence:  strings.TrimSpace(row[7]),
	}
	if m.Key == "" || m.NamePattern == "" || m.Vendor == "" {
		return Model{}, fmt.Errorf("key, vendor and name_pattern are required")
	}
	m.Uncertain = strings.Contains(m.Confidence, "uncertain")
	num := func(field, s string) (float64, error) {
		s = strings.TrimSpace(s)
		if strings.HasSuffix(s, "?") {
			m.Uncertain = true
			s = strings.TrimSuffix(s, "?")
		}
		if s == "" {
			return 0, nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return 0, fmt.Errorf("%s: %q is not a non-negative number", field, s)
		}
		return v, nil
	}
	mem, err := num("memory_gib", row[3])
	if err != nil {
		return Model{}, err
	}
	m.MemoryGiB = uint64(mem)
	if m.BF16TFLOPS, err = num("bf16_tflops", row[4]); err != nil {
		return Model{}, err
	}
	if m.BandwidthGBs, err = num("bandwidth_gbs", row[5]); err != nil {
		return Model{}, err
	}
	if m.ListPriceCNY, err = num("list_cny_per_card_hour", row[6]); err != nil {
		return Model{}, err
	}
	m.ComputeUnits = math.Round(m.BF16TFLOPS/312*1000) / 1000
	m.patternWords = nameWords(m.NamePattern)
	return m, nil
}

// Models returns every model in catalog order.
func (c *Catalog) Models() []Model { return append([]Model(nil), c.models...) }

// Keys returns every model key in catalog order.
func (c *Catalog) Keys() []string {
	keys := make([]string, len(c.models))
	for i, m := range c.models {
		keys[i] = m.Key
	}
	return keys
}

// Lookup returns the model with the given key.
func (c *Catalog) Lookup(key string) (Model, bool) {
	i, ok := c.byKey[key]
	if !ok {
		return Model{}, false
	}
	return c.models[i], true
}

// Match finds the model of a device from its raw name and total memory in MiB.
// A model matches when every word of its name pattern appears among the words
// of the name (case-insensitive; '-', '_' and ',' separate words; a pattern
// word ending in a letter also matches the same word followed by digits, so
// "910B" matches "910B3"). Among the models whose pattern matches, the one
// whose memory is closest to memMiB wins, and it must be within 20% of it
// (memMiB 0 means unknown and picks the smallest); patterns with more words
// win over shorter ones, so "RTX PRO 6000D" beats "RTX PRO 6000".
func (c *Catalog) Match(rawName string, memMiB uint64) (Model, bool) {
	words := nameWords(rawName)
	best, bestLen := -1, 0
	bestDiff := math.Inf(1)
	memGiB := float64(memMiB) / 1024
	for i, m := range c.models {
		if !containsWords(words, m.patternWords) {
			continue
		}
		diff := 0.0
		if memMiB > 0 {
			diff = math.Abs(float64(m.MemoryGiB) - memGiB)
			if diff > 0.2*float64(m.MemoryGiB) {
				continue
			}
		} else {
			diff = float64(m.MemoryGiB)
		}
		l := len(m.patternWords)
		if l > bestLen || (l == bestLen && diff < bestDiff) {
			best, bestLen, bestDiff = i, l, diff
		}
	}
	if best < 0 {
		return Model{}, false
	}
	return c.models[best], true
}

// Resolve fills a card's model fields (Model, Known, ComputeUnits,
// BandwidthGBs) from the catalog, or, for an unknown device, derives a key
// from its name and leaves its compute units unknown (0).
func (c *Catalog) Resolve(card *Card) {
	if m, ok := c.Match(card.Name, card.MemoryMiB); ok && (card.Vendor == "" || card.Vendor == m.Vendor) {
		card.Model, card.Known = m.Key, true
		card.Vendor = m.Vendor
		card.ComputeUnits, card.BandwidthGBs = m.ComputeUnits, m.BandwidthGBs
		return
	}
	card.Model, card.Known = DeriveKey(card.Name, card.MemoryMiB), false
	card.ComputeUnits = 0
}

// Closest returns up to n catalog keys nearest to key by edit distance, best
// first, for "did you mean" messages.
func (c *Catalog) Closest(key string, n int) []string {
	type cand struct {
		key  string
		dist int
	}
	key = strings.ToLower(key)
	cands := make([]cand, 0, len(c.models))
	for _, m := range c.models {
		d := editDistance(key, m.Key)
		if strings.HasPrefix(m.Key, key) && key != "" {
			d = 0 // a prefix is the best hint there is
		}
		cands = append(cands, cand{m.Key, d})
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].dist < cands[j].dist })
	if n > len(cands) {
		n = len(cands)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = cands[i].key
	}
	return out
}

// DerivedKeyPrefix starts every model key that is not in the catalog.
const DerivedKeyPrefix = "x-"

// DeriveKey builds a model key for a device the catalog does not know: "x-",
// the lower-case words of its name without vendor words, and its memory
// rounded to GiB ("NVIDIA Tesla T4", 15360 MiB → "x-tesla-t4-15g").
func DeriveKey(rawName string, memMiB uint64) string {
	var kept []string
	for _, w := range nameWords(rawName) {
		switch w {
		case "nvidia", "amd", "hygon", "huawei", "kunlunxin", "geforce", "mthreads", "moore", "threads":
			continue
		}
		kept = append(kept, w)
	}
	if len(kept) == 0 {
		kept = []string{"card"}
	}
	return fmt.Sprintf("%s%s-%dg", DerivedKeyPrefix, strings.Join(kept, "-"), (memMiB+512)/1024)
}

// IsDerivedKey reports whether key was made by DeriveKey.
func IsDerivedKey(key string) bool { return strings.HasPrefix(key, DerivedKeyPrefix) }

func nameWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.')
	})
}

func containsWords(words, pattern []string) bool {
	for _, p := range pattern {
		found := false
		for _, w := range words {
			if w == p || wordExtends(w, p) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return len(pattern) > 0
}

// wordExtends reports whether w is p followed only by digits, where p ends in
// a letter ("910b3" extends "910b"; "h200" does not extend "h20").
func wordExtends(w, p string) bool {
	if len(w) <= len(p) || !strings.HasPrefix(w, p) {
		return false
	}
	last := p[len(p)-1]
	if last < 'a' || last > 'z' {
		return false
	}
	for _, r := range w[len(p):] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
