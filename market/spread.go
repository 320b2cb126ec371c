package market

// Spreading a service's replicas over regions. Replicas always go to
// distinct nodes (a node that holds one is excluded from the next rounds);
// among the nodes that can take one, those in a region that holds no
// replica of the service yet come first, so that the loss of a region
// (a power cut, a provider's outage) leaves replicas running. Where the
// supply offers fewer regions than replicas, the rest go to the best nodes
// of the regions there are. A node that advertises no region counts as in
// an unknown one: it is never preferred for spreading, and it is taken
// like any other when filling up.
//
// Both stages of a placement spread: selection asks the best node of each
// unused region for sure (the bids it then gets can spread), and clearing
// picks winners the same way among the bids. Everything is in rank order
// with ties broken as before, so the same input gives the same placement.

// spreadRegions returns the regions that hold a live replica of a service
// job — not one being moved off a draining node — or nil for a job whose
// shares are not spread over regions (every kind but services).
func (j *job) spreadRegions() map[string]bool {
	if j.spec.KindOrDefault() != KindService {
		return nil
	}
	used := map[string]bool{}
	for _, p := range j.live {
		if p.State != PlacementStopping && !p.moving && p.Region != "" {
			used[p.Region] = true
		}
	}
	return used
}

// spreadOver picks want of n items ranked best first: first, in rank
// order, the best item of each region neither in used nor picked already
// (avoided items and items of no region are passed over in this pass),
// then the best of the others. It returns the picked indexes and the
// others', each in rank order. used is not changed.
func spreadOver(n, want int, region func(int) string, avoided func(int) bool, used map[string]bool) (picked, rest []int) {
	taken := make([]bool, n)
	seen := map[string]bool{}
	count := 0
	for i := 0; i < n && count < want; i++ {
		r := region(i)
		if r == "" || used[r] || seen[r] || avoided(i) {
			continue
		}
		seen[r], taken[i] = true, true
		count++
	}
	for i := 0; i < n && count < want; i++ {
		if !taken[i] {
			taken[i] = true
			count++
		}
	}
	for i := 0; i < n; i++ {
		if taken[i] {
			picked = append(picked, i)
		} else {
			rest = append(rest, i)
		}
	}
	return picked, rest
}
