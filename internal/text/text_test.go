package text

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "card", "0 cards"},
		{1, "card", "1 card"},
		{2, "card", "2 cards"},
		{1, "bid", "1 bid"},
		{-1, "card", "-1 cards"},
		{3, "feasible card", "3 feasible cards"},
	} {
		if got := Count(tc.n, tc.noun); got != tc.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
	if got := Plural(2, "process", "processes"); got != "2 processes" {
		t.Errorf("Plural: %q", got)
	}
	if got := Plural(1, "process", "processes"); got != "1 process" {
		t.Errorf("Plural: %q", got)
	}
}

func TestBytes(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0 bytes", 1: "1 byte", 1000: "1000 bytes", 1023: "1023 bytes",
		1024: "1 KiB", 1536: "1.5 KiB", 4096: "4 KiB", 64 << 10: "64 KiB",
		1 << 20: "1 MiB", 8 << 20: "8 MiB", 64 << 20: "64 MiB", 8000000: "7.6 MiB",
		1536 << 20: "1536 MiB", 16 << 30: "16 GiB", 1 << 50: "1 PiB", (1 << 20) + 1: "1.0 MiB",
		-(64 << 20): "-64 MiB",
	} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
}
