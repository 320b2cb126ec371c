package market

import "slices"

// Coordinators ranks members by rendezvous (highest random weight) hashing of
// jobID and returns the top r, best first: the job's coordinator, then its
// successors. Every node that knows the same members computes the same
// answer, so "submit anywhere, ask anywhere" needs no directory; when a
// member leaves, only the jobs it ranked first move. Duplicate members count
// once; r <= 0 returns nil; r beyond the member count returns them all.
//
// The weight is a 64-bit FNV-1a hash of jobID, a zero byte and the member,
// finished with the SplitMix64 mixer; it is stable across versions and
// platforms. Ties (vanishingly rare) go to the lower member string.
func Coordinators(jobID string, members []string, r int) []string {
	if r <= 0 || len(members) == 0 {
		return nil
	}
	type scored struct {
		member string
		w      uint64
	}
	base := fnv1aByte(fnv1a(fnvOffset, jobID), 0)
	better := func(a, b scored) bool { return a.w > b.w || (a.w == b.w && a.member < b.member) }
	// Keep the best r in order: one pass, no sort of all members (node
	// asks for the top one or three among hundreds).
	top := make([]scored, 0, min(r, len(members))+1)
	for _, m := range members {
		s := scored{m, mix64(fnv1a(base, m))}
		if len(top) == cap(top)-1 && !better(s, top[len(top)-1]) {
			continue
		}
		i := len(top)
		for i > 0 && better(s, top[i-1]) {
			i--
		}
		if i > 0 && top[i-1].member == s.member || i < len(top) && top[i].member == s.member {
			continue // a duplicate member
		}
		top = slices.Insert(top, i, s)
		if len(top) > cap(top)-1 {
			top = top[:cap(top)-1]
		}
	}
	out := make([]string, len(top))
	for i, s := range top {
		out[i] = s.member
	}
	return out
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnv1aByte(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime
}

// mix64 is SplitMix64's finalizer: it spreads FNV's weak low bits.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// seedOf derives the deterministic seed of a job's random choices (tie
// breaks) from its ID, so a placement can be replayed in a postmortem.
func seedOf(jobID string) uint64 { return mix64(fnv1a(fnvOffset, jobID)) }

// tieKey orders equal-scored candidates by a hash of the job's seed and the
// candidate's name: a stable shuffle that differs from job to job, so
// concurrent jobs do not all pick the same supplier among equals.
func tieKey(seed uint64, node, card string) uint64 {
	h := fnv1a(seed^fnvOffset, node)
	h = fnv1aByte(h, 0)
	return mix64(fnv1a(h, card))
}
