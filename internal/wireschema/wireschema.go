// Package wireschema describes the JSON form of Go types as sorted lines,
// one per field ("bid.cards[].model string", "?" after an optional one),
// so that a test can hold a wire version's schema in a golden file and
// fail when a field is added, removed, renamed or retyped.
package wireschema

import (
	"encoding"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
)

// Of returns the lines of the JSON form of v's type, each starting with
// name.
func Of(name string, v any) []string {
	var lines []string
	walk(reflect.TypeOf(v), name, map[reflect.Type]bool{}, &lines)
	sort.Strings(lines)
	return lines
}

// Text joins schemas into one sorted text, a line each.
func Text(schemas ...[]string) string {
	var all []string
	for _, s := range schemas {
		all = append(all, s...)
	}
	sort.Strings(all)
	return strings.Join(all, "\n") + "\n"
}

// Diff lists the lines only in was ("- ") and only in now ("+ ").
func Diff(was, now string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			m[l] = true
		}
		return m
	}
	a, b := in(was), in(now)
	var out []string
	for l := range a {
		if !b[l] {
			out = append(out, "  - "+l)
		}
	}
	for l := range b {
		if !a[l] {
			out = append(out, "  + "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

var (
	jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textMarshaler = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

func walk(t reflect.Type, path string, seen map[reflect.Type]bool, out *[]string) {
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		*out = append(*out, path+" "+t.String())
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		walk(t.Elem(), path, seen, out)
	case reflect.Slice, reflect.Array:
		// encoding/json writes a []byte as base64, a [N]byte as an array
		// of numbers.
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			*out = append(*out, path+" bytes")
			return
		}
		walk(t.Elem(), path+"[]", seen, out)
	case reflect.Map:
		walk(t.Elem(), path+"{"+t.Key().Kind().String()+"}", seen, out)
	case reflect.Struct:
		if seen[t] {
			*out = append(*out, path+" "+t.String()+" (recursive)")
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			// encoding/json reads the fields of an embedded struct even
			// when its type is unexported.
			if !f.IsExported() && !(f.Anonymous && f.Type.Kind() == reflect.Struct) {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				walk(f.Type, path, seen, out)
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := path + "." + name
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				p += "?"
			}
			walk(f.Type, p, seen, out)
		}
	default:
		*out = append(*out, path+" "+t.Kind().String())
	}
}
