package jobstate

import "sync"

// Adopting marks the jobs a node is claiming, so that the paths that
// adopt (succession, resumption after a restart, the audit) do not claim
// one job twice at once. The zero Adopting marks none; it must not be
// copied once used.
type Adopting struct {
	mu sync.Mutex
	by map[string]bool
}

// Begin marks job, and reports false when it was marked already.
func (a *Adopting) Begin(job string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[string]bool{}
	}
	if a.by[job] {
		return false
	}
	a.by[job] = true
	return true
}

// End unmarks job.
func (a *Adopting) End(job string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.by, job)
}
