package workload

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseAvailability(t *testing.T) {
	in := "node,up_s,down_s\nhome-2,0,60\ncafe-1,0,\nhome-2,120,180.5\n"
	av, err := ParseAvailability(strings.NewReader(in), "av.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got := av.Nodes(); len(got) != 2 || got[0] != "cafe-1" || got[1] != "home-2" {
		t.Fatalf("nodes %v", got)
	}
	h := av.Of("home-2")
	if len(h) != 2 || h[0].Down != time.Minute || h[1].Up != 2*time.Minute || h[1].Down != 180500*time.Millisecond || h[1].Line != 4 {
		t.Fatalf("home-2: %+v", h)
	}
	if c := av.Of("cafe-1"); c[0].Down != Forever {
		t.Fatalf("cafe-1: %+v", c)
	}
}

func TestParseAvailabilityNamesTheBadLine(t *testing.T) {
	head := "node,up_s,down_s\n"
	for _, tc := range []struct {
		name, in string
		line     int
		col, msg string
	}{
		{"no header", "x,y\n", 1, "", "lacks column node"},
		{"empty node", head + ",0,5\n", 2, "node", "label"},
		{"space in node", head + "a b,0,5\n", 2, "node", "label"},
		{"down before up", head + "a,0,5\na,10,10\n", 3, "down_s", "not after"},
		{"bad up", head + "a,soon,5\n", 2, "up_s", `got "soon"`},
		{"overlap", head + "a,0,50\nb,0,\na,40,60\n", 4, "up_s", "lines 2 and 4 overlap"},
		{"open overlap", head + "a,0,\na,40,60\n", 3, "up_s", "already up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAvailability(strings.NewReader(tc.in), "av.csv")
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != tc.line || pe.Column != tc.col || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v; want line %d column %q containing %q", err, tc.line, tc.col, tc.msg)
			}
		})
	}
}
