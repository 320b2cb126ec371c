package market

import (
	"math"
	"path"
	"slices"

	"github.com/gpumesh/gpumesh/device"
)

// DefaultMaxPrice is the max price of a job that names none: the highest
// price a supplier asks by default (device.Model.DefaultPriceCNY: the list
// price, or an estimate from compute or memory) among the catalog models
// the spec's card filter allows, rounded up to the fen, so that every
// allowed card at its default price can win. A filter that may match
// cards outside the catalog (a derived "x-" key or pattern) has no such
// figure: the error is a *SpecError on max_price_cny, as is the error of a
// filter that no catalog model passes. cat nil means
// device.DefaultCatalog.
//
// The CLI (gpumesh submit without --max-price) and the API (a bare spec
// whose max_price_cny is absent or 0, which the node signs for an owner
// token) both fill the price in with it.
func DefaultMaxPrice(s *JobSpec, cat *device.Catalog) (float64, error) {
	if cat == nil {
		cat = device.DefaultCatalog()
	}
	for _, m := range s.Models {
		if device.IsDerivedKey(m) {
			return 0, specErr("max_price_cny", "required when the models include cards outside the catalog (%s): their price is unknown", m)
		}
	}
	best := 0.0
	for _, m := range cat.Models() {
		if s.allowsModel(m) {
			best = max(best, m.DefaultPriceCNY())
		}
	}
	if best == 0 {
		return 0, specErr("max_price_cny", "required: no catalog model passes the card filter, so there is no default")
	}
	return math.Ceil(best*100) / 100, nil
}

// FillMaxPrice gives a spec that names no max price (0) its
// DefaultMaxPrice and reports whether it did; a spec that names one is
// left as it is. The rest of the spec is validated first, so that an
// error names the field that is wrong (an unknown model, say) rather than
// the price that could not be worked out from it.
func (s *JobSpec) FillMaxPrice(cat *device.Catalog) (filled bool, err error) {
	if s.MaxPriceCNY != 0 {
		return false, nil
	}
	probe := *s
	probe.MaxPriceCNY = MaxPriceCap // any valid price: the rest is checked
	if err := probe.Validate(cat); err != nil {
		return false, err
	}
	price, err := DefaultMaxPrice(s, cat)
	if err != nil {
		return false, err
	}
	s.MaxPriceCNY = price
	return true, nil
}

// allowsModel reports whether the spec's card filter lets cards of model
// m: its vendors, memory and compute minimums, and its models (keys or
// patterns).
func (s *JobSpec) allowsModel(m device.Model) bool {
	if len(s.Vendors) > 0 && !slices.Contains(s.Vendors, m.Vendor) {
		return false
	}
	if m.MemoryGiB*1024 < s.MinMemoryMiB || (s.MinComputeUnits > 0 && m.ComputeUnits < s.MinComputeUnits) {
		return false
	}
	if len(s.Models) == 0 {
		return true
	}
	return slices.ContainsFunc(s.Models, func(p string) bool {
		ok, _ := path.Match(p, m.Key)
		return ok
	})
}
