package device

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseSimSpec(t *testing.T) {
	cat := DefaultCatalog()
	cases := []struct {
		spec string
		want SimSpec
	}{
		{"h100-sxm-80g:8,rtx4090-48g:2,mtt-s4000-48g:4",
			SimSpec{{"h100-sxm-80g", 8}, {"rtx4090-48g", 2}, {"mtt-s4000-48g", 4}}},
		{"h200-141g", SimSpec{{"h200-141g", 1}}},
		{" H100-SXM-80G : 2 , a100-80g ", SimSpec{{"h100-sxm-80g", 2}, {"a100-80g", 1}}},
		{"a100-80g:1,a100-80g:2", SimSpec{{"a100-80g", 1}, {"a100-80g", 2}}},
		{"h100-sxm-80g:1024", SimSpec{{"h100-sxm-80g", 1024}}},
		{"h100-sxm-80g:0008", SimSpec{{"h100-sxm-80g", 8}}},
	}
	for _, tc := range cases {
		got, err := ParseSimSpec(tc.spec, cat)
		if err != nil {
			t.Errorf("ParseSimSpec(%q): %v", tc.spec, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSimSpec(%q) = %v, want %v", tc.spec, got, tc.want)
		}
	}
}

func TestParseSimSpecErrorsNameTheToken(t *testing.T) {
	cat := DefaultCatalog()
	cases := []struct {
		spec, token, reason string
		closest             []string
	}{
		{"h100-sxm-80g:x", "h100-sxm-80g:x", `count "x" is not a whole number`, nil},
		{"bogus:1", "bogus:1", `unknown model "bogus"`, nil},
		{"h100:2", "h100:2", `unknown model "h100"`, []string{"h100-sxm-80g", "h100-pcie-80g"}},
		{":3", ":3", "missing model key", nil},
		{"", "", "empty spec", nil},
		{"   ", "   ", "empty spec", nil},
		{"h100-sxm-80g:0", "h100-sxm-80g:0", "at least 1", nil},
		{"h100-sxm-80g:1025", "h100-sxm-80g:1025", "over 1024", nil},
		{"h100-sxm-80g:99999999999999999999", "h100-sxm-80g:99999999999999999999", "over 1024", nil},
		{"h100-sxm-80g:-1", "h100-sxm-80g:-1", "not a whole number", nil},
		{"h100-sxm-80g:+2", "h100-sxm-80g:+2", "not a whole number", nil},
		{"h100-sxm-80g:", "h100-sxm-80g:", "missing count", nil},
		{"a100-80g:2,,h200-141g:1", "", "entry 2 of 3 is empty", nil},
		{"a100-80g:2,", "", "entry 2 of 2 is empty", nil},
		{"a100-80g:1000,h200-141g:25", "h200-141g:25", "more than 1024 cards in total", nil},
		{"a100-80g:2:3", "a100-80g:2:3", "not a whole number", nil},
	}
	for _, tc := range cases {
		_, err := ParseSimSpec(tc.spec, cat)
		var se *SpecError
		if !errors.As(err, &se) {
			t.Errorf("ParseSimSpec(%q) error = %v, want a *SpecError", tc.spec, err)
			continue
		}
		if se.Token != tc.token || !strings.Contains(se.Reason, tc.reason) {
			t.Errorf("ParseSimSpec(%q) = token %q reason %q; want token %q reason containing %q",
				tc.spec, se.Token, se.Reason, tc.token, tc.reason)
		}
		for _, k := range tc.closest {
			if !strings.Contains(se.Error(), k) {
				t.Errorf("ParseSimSpec(%q) error %q does not suggest %q", tc.spec, se.Error(), k)
			}
		}
		if strings.Contains(se.Error(), "\n") {
			t.Errorf("ParseSimSpec(%q) error spans lines: %q", tc.spec, se.Error())
		}
	}
}

func TestParseSimSpecUnknownModelSuggestsThreeKeys(t *testing.T) {
	_, err := ParseSimSpec("bogus:1", DefaultCatalog())
	var se *SpecError
	if !errors.As(err, &se) || len(se.Closest) != 3 {
		t.Fatalf("err = %v, want three suggestions", err)
	}
	for _, k := range se.Closest {
		if _, ok := DefaultCatalog().Lookup(k); !ok {
			t.Errorf("suggestion %q is not a catalog key", k)
		}
	}
	if !strings.Contains(err.Error(), "closest known: "+strings.Join(se.Closest, ", ")) {
		t.Errorf("message %q does not list the suggestions", err)
	}
}

// FuzzParseSimSpec checks that no input panics, every accepted spec holds
// known keys and legal counts, and an accepted spec reads back the same from
// its String form.
func FuzzParseSimSpec(f *testing.F) {
	for _, s := range []string{"h100-sxm-80g:8,rtx4090-48g:2,mtt-s4000-48g:4", "h200-141g", ":3", "bogus:1",
		"h100-sxm-80g:x", "", ",", "a:1:2", "A100-80G : 0001", "h100-sxm-80g:1024,a100-80g:1"} {
		f.Add(s)
	}
	cat := DefaultCatalog()
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := ParseSimSpec(spec, cat)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *SpecError", err)
			}
			return
		}
		if len(got) == 0 || got.Total() > MaxSimCards {
			t.Fatalf("accepted %q as %v", spec, got)
		}
		for _, e := range got {
			if _, ok := cat.Lookup(e.Key); !ok || e.Count < 1 || e.Count > MaxSimCards {
				t.Fatalf("accepted %q with entry %+v", spec, e)
			}
		}
		again, err := ParseSimSpec(got.String(), cat)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q → %q → %v, %v", spec, got.String(), again, err)
		}
	})
}
