package device

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file holds the lenient readers the vendor-tool parsers share: tools
// print numbers as JSON numbers, as strings with units ("49152MiB", "35 C"),
// as {"value": 196592, "unit": "MB"} objects, or as "N/A".

// errNoJSON is returned when a tool's output holds no JSON value at all.
var errNoJSON = errors.New("no JSON in output")

// decodeToolJSON decodes the first JSON object or array in data into v. Some
// tools print warnings before their JSON; those lines are skipped. Numbers
// are kept as json.Number.
func decodeToolJSON(data []byte, v any) error {
	i := bytes.IndexAny(data, "{[")
	if i < 0 {
		return errNoJSON
	}
	dec := json.NewDecoder(bytes.NewReader(data[i:]))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}

// quantity reads a number and its unit from a JSON value. ok is false for a
// missing value, "N/A" and anything else that is not a finite, non-negative
// number.
func quantity(v any) (num float64, unit string, ok bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, "", err == nil && finite(f)
	case float64:
		return x, "", finite(x)
	case string:
		return parseQuantity(x)
	case map[string]any:
		n, _, ok := quantity(lookup(x, "value"))
		u, _ := lookup(x, "unit").(string)
		return n, strings.TrimSpace(u), ok
	}
	return 0, "", false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 }

// parseQuantity splits "49152MiB", "35.0 C", "93.6" into number and unit.
func parseQuantity(s string) (float64, string, bool) {
	s = strings.TrimSpace(s)
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	if end == 0 {
		return 0, "", false
	}
	f, err := strconv.ParseFloat(s[:end], 64)
	if err != nil || !finite(f) {
		return 0, "", false
	}
	return f, strings.TrimSpace(s[end:]), true
}

// toMiB converts an amount in unit to MiB. The tools write "MB" for MiB
// (amd-smi reports an MI300X's 192 GiB as 196592 MB), so MB is read as MiB
// and GB as GiB. An empty unit means defUnit. ok is false for an unknown unit.
func toMiB(n float64, unit, defUnit string) (uint64, bool) {
	if unit == "" {
		unit = defUnit
	}
	var mib float64
	switch strings.ToLower(strings.TrimSpace(unit)) {
	case "b", "byte", "bytes":
		mib = n / (1 << 20)
	case "kb", "kib":
		mib = n / 1024
	case "mb", "mib":
		mib = n
	case "gb", "gib":
		mib = n * 1024
	default:
		return 0, false
	}
	if mib > 1<<40 { // a petabyte of device memory is garbage
		return 0, false
	}
	return uint64(math.Round(mib)), true
}

// lookup finds a key in a JSON object ignoring case and surrounding spaces
// ("Power Draw " and "power draw" are the same key).
func lookup(obj map[string]any, key string) any {
	if v, ok := obj[key]; ok {
		return v
	}
	want := normKey(key)
	for k, v := range obj {
		if normKey(k) == want {
			return v
		}
	}
	return nil
}

func normKey(k string) string { return strings.ToLower(strings.Join(strings.Fields(k), " ")) }

// text reads a JSON value as a trimmed string ("" when missing or "N/A").
func text(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return ""
	}
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "n/a") {
		return ""
	}
	return s
}

// percent reads a utilization figure, clamped to 0..100.
func percent(v any) uint32 {
	n, _, ok := quantity(v)
	if !ok {
		return 0
	}
	return uint32(math.Round(math.Min(n, 100)))
}

// celsius reads a temperature in °C.
func celsius(v any) uint32 {
	n, _, ok := quantity(v)
	if !ok || n > 1000 {
		return 0
	}
	return uint32(math.Round(n))
}

// watts reads a power draw in W (a "mW" unit is converted).
func watts(v any) float64 {
	n, unit, ok := quantity(v)
	if !ok || n > 1e6 {
		return 0
	}
	if strings.EqualFold(unit, "mw") {
		n /= 1000
	}
	return math.Round(n*10) / 10
}
