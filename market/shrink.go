package market

import (
	"cmp"
	"slices"
)

// A scale-down shrinks what runs and starts nothing: it drops what is not
// placed yet, then stops whole running shares. A share's process holds its
// cards for its life (they are in its CUDA_VISIBLE_DEVICES), so a share is
// never cut down to fewer cards, and nothing new is placed to make up for
// stopping too much: stopping a share past the target would mean placing
// cards again, at a new price, for a job that asked for less. So for
// LayoutAny the shares stopped are those whose cards add up to the most
// that does not go below the target, the most expensive per card first
// among equal choices, and the job keeps the rest: scaled from two 4-card
// shares to 2 cards it stops one share and holds 4 (its record's Cards
// says so). Slot layouts scale in whole shares anyway (ScaleJob takes only
// multiples of the cards per node).

// shrinkNow brings the job down to its target as far as whole shares
// allow: first by dropping what is not placed yet, then by stopping whole
// running shares (for LayoutAny, see stopShares; for slot layouts the
// highest share numbers). For LayoutAny the target becomes what is left
// when no set of whole shares adds up to the cards to give back. With a
// round open it waits for the round to end.
func (c *coordinator) shrinkNow(j *job) {
	j.shrinkPending = false
	if j.round != nil {
		j.shrinkPending = true
		return
	}
	running := slices.DeleteFunc(j.liveSorted(), func(p *placement) bool { return p.State == PlacementStopping })
	if !j.flexible() {
		k := j.perSlot()
		excess := len(running) + len(j.needSlots) - j.target/k
		for excess > 0 && len(j.needSlots) > 0 {
			j.needSlots = j.needSlots[:len(j.needSlots)-1]
			excess--
		}
		for i := len(running) - 1; i >= 0 && excess > 0; i-- {
			c.stopPlacement(j, running[i], "scaled down")
			excess--
		}
		return
	}
	held := 0
	for _, p := range running {
		held += len(p.Cards)
	}
	excess := held + j.needCards - j.target
	n := min(max(excess, 0), j.needCards)
	j.needCards -= n
	excess -= n
	if excess <= 0 {
		return
	}
	slices.SortStableFunc(running, func(a, b *placement) int {
		if c := cmp.Compare(b.PriceCNY, a.PriceCNY); c != 0 {
			return c
		}
		return b.Share - a.Share
	})
	sizes := make([]int, len(running))
	for i, p := range running {
		sizes[i] = len(p.Cards)
	}
	stopped := 0
	for _, i := range stopShares(sizes, excess) {
		c.stopPlacement(j, running[i], "scaled down")
		stopped += sizes[i]
	}
	j.target += excess - stopped // what whole shares could not give back stays
	c.touch(j)
}

// stopShares picks the shares to stop: of shares with sizes cards each,
// in the order they should go first, a set whose sizes add up to the most
// that is at most excess; among sets of that sum, the one that takes the
// earliest shares (compared share by share). It returns their indexes,
// ascending. A subset-sum over the sums reachable from each suffix: n ×
// excess bits.
func stopShares(sizes []int, excess int) []int {
	if excess <= 0 || len(sizes) == 0 {
		return nil
	}
	words := excess/64 + 1
	// reach[i] has bit s set when shares i.. can add up to exactly s.
	reach := make([][]uint64, len(sizes)+1)
	reach[len(sizes)] = make([]uint64, words)
	reach[len(sizes)][0] = 1
	for i := len(sizes) - 1; i >= 0; i-- {
		reach[i] = shiftOr(reach[i+1], sizes[i], excess)
	}
	best := excess
	for best > 0 && reach[0][best/64]&(1<<(best%64)) == 0 {
		best--
	}
	var out []int
	for i, left := 0, best; i < len(sizes) && left > 0; i++ {
		if s := sizes[i]; s <= left && reach[i+1][(left-s)/64]&(1<<((left-s)%64)) != 0 {
			out = append(out, i)
			left -= s
		}
	}
	return out
}

// shiftOr returns b | b<<k, keeping bits 0..limit.
func shiftOr(b []uint64, k, limit int) []uint64 {
	out := slices.Clone(b)
	if k <= 0 {
		return out
	}
	wordShift, bitShift := k/64, uint(k%64)
	for i := len(b) - 1; i >= wordShift; i-- {
		v := b[i-wordShift] << bitShift
		if bitShift > 0 && i-wordShift-1 >= 0 {
			v |= b[i-wordShift-1] >> (64 - bitShift)
		}
		out[i] |= v
	}
	if extra := uint(limit%64 + 1); extra < 64 {
		out[len(out)-1] &= 1<<extra - 1
	}
	return out
}
