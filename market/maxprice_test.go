package market

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

// A spec without a max price gets the highest default price among the
// models its filter allows; one with a price keeps it; one whose filter
// cannot be priced says why, naming the field that is wrong.
func TestFillMaxPrice(t *testing.T) {
	cat := device.DefaultCatalog()
	for _, tc := range []struct {
		name   string
		mod    func(*JobSpec)
		price  float64 // after
		filled bool
		field  string // of the error; "" for none
		msg    string
	}{
		{"named price is kept", func(s *JobSpec) { s.MaxPriceCNY = 3 }, 3, false, "", ""},
		{"one model", func(s *JobSpec) { s.Models = []string{"h100-sxm-80g"} }, 22.50, true, "", ""},
		{"the dearest allowed model", func(s *JobSpec) { s.Models = []string{"a100-80g", "h100-sxm-80g"} }, 22.50, true, "", ""},
		{"a pattern", func(s *JobSpec) { s.Models = []string{"a100-*"} }, 11.40, true, "", ""},
		{"uncatalogued", func(s *JobSpec) { s.Models = []string{"x-tesla-t4-15g"} }, 0, false, "max_price_cny", "outside the catalog (x-tesla-t4-15g)"},
		{"no model has the memory", func(s *JobSpec) { s.MinMemoryMiB = 1 << 20 }, 0, false, "max_price_cny", "no catalog model passes the card filter"},
		{"unknown model", func(s *JobSpec) { s.Models = []string{"h1000"} }, 0, false, "models[0]", "unknown model"},
		{"another field wrong", func(s *JobSpec) { s.Models = []string{"h100-sxm-80g"}; s.Cards = 0 }, 0, false, "cards", "between 1 and"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.MaxPriceCNY = 0
			tc.mod(&s)
			filled, err := s.FillMaxPrice(cat)
			var se *SpecError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.field != "" && (!errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Msg, tc.msg)):
				t.Fatalf("error %v, want one on %s saying %q", err, tc.field, tc.msg)
			}
			if s.MaxPriceCNY != tc.price || filled != tc.filled {
				t.Errorf("price %v (filled %v), want %v (%v)", s.MaxPriceCNY, filled, tc.price, tc.filled)
			}
		})
	}
}
