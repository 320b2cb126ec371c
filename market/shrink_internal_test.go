package market

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// stopShares gives back the most cards whole shares can without going
// below the target, preferring the shares listed first; checked against
// every subset on small random cases.
func TestStopSharesAgainstEverySubset(t *testing.T) {
	for _, c := range []struct {
		sizes  []int
		excess int
		want   []int
	}{
		{[]int{4, 4}, 6, []int{0}},           // 8 → 2: one share goes, 4 cards stay
		{[]int{4, 4}, 8, []int{0, 1}},        // 8 → 0
		{[]int{3, 2, 2}, 4, []int{1, 2}},     // exactly 4 beats the dearer 3
		{[]int{3, 2, 2}, 5, []int{0, 1}},     // 5 = 3 + 2, the dearer first
		{[]int{8, 8, 8}, 7, nil},             // nothing fits
		{[]int{1, 64, 1}, 65, []int{0, 1}},   // across a word of the bitset
		{[]int{70, 60}, 130, []int{0, 1}},    // sums past one word
		{[]int{70, 60, 1}, 129, []int{0, 2}}, // 70 + 1 = 71 beats 60 + 1; 130 is too many
	} {
		if got := stopShares(c.sizes, c.excess); !slices.Equal(got, c.want) {
			t.Errorf("stopShares(%v, %d) = %v, want %v", c.sizes, c.excess, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 2000; i++ {
		sizes := make([]int, 1+r.IntN(10))
		for k := range sizes {
			sizes[k] = 1 + r.IntN(9)
		}
		excess := r.IntN(50)
		got := stopShares(sizes, excess)
		// The reference: the best sum over every subset, and among those
		// the first in share order (lexicographically least index list).
		var want []int
		best := -1
		for mask := 0; mask < 1<<len(sizes); mask++ {
			sum := 0
			var idx []int
			for k := range sizes {
				if mask&(1<<k) != 0 {
					sum += sizes[k]
					idx = append(idx, k)
				}
			}
			if sum > excess {
				continue
			}
			if sum > best || (sum == best && earlier(idx, want)) {
				best, want = sum, idx
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("stopShares(%v, %d) = %v, want %v (sum %d)", sizes, excess, got, want, best)
		}
	}
}

// earlier reports whether share list a takes earlier shares than b: at the
// first place they differ, a's share comes first (or b has none).
func earlier(a, b []int) bool {
	for i := range a {
		if i >= len(b) {
			return false
		}
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
