// Package text words numbers for people: a count with its noun in the
// right number ("1 card", "2 cards") and a size in binary units ("64 MiB"
// rather than 67108864 bytes). Pure functions of their arguments; every
// layer may use them, the market core included.
package text

import "strconv"

// Count is n and its noun, singular for 1, else plural by adding "s":
// Count(1, "card") is "1 card", Count(0, "bid") "0 bids". The noun
// may be several words, the last of which takes the number ("feasible
// card"). For a noun whose plural is not made so, use Plural.
func Count(n int, noun string) string { return Plural(n, noun, noun+"s") }

// Plural is n and one (for 1) or many: Plural(2, "process", "processes")
// is "2 processes".
func Plural(n int, one, many string) string {
	if n == 1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Bytes is a size in the largest binary unit that holds it whole: 64 MiB,
// 1536 MiB, 16 GiB; a size whole in none of them has one decimal of the
// largest unit below it (7.6 MiB, 1.0 MiB for a byte over 1 MiB); under
// 1 KiB it is counted in bytes (1 byte, 1000 bytes).
func Bytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	abs := n
	if abs < 0 {
		abs = -abs
	}
	if abs < 1024 {
		return Count(int(n), "byte")
	}
	i, v := -1, n
	for i < len(units)-1 && v%1024 == 0 && v != 0 {
		v /= 1024
		i++
	}
	if i >= 0 {
		return strconv.FormatInt(v, 10) + " " + units[i]
	}
	f, j := float64(n), -1
	for j < len(units)-1 && (f >= 1024 || f <= -1024) {
		f /= 1024
		j++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[j]
}
