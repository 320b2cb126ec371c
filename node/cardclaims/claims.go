// Package cardclaims finds cards claimed by two peers. Every capacity ad
// carries the hardware evidence of its cards (gossip.CardEvidence: UUID,
// serial, ...), signed by its author. Evidence alone proves nothing — a
// node can write anything — but a card UUID or serial in two peers' ads is
// a copied or invented card: one of them lies, and a coordinator cannot
// tell which. So both are held back (market.Offer.HeldBack): no coordinator
// asks either to bid until one of them is gone from its book.
//
// An Index is not safe for concurrent use: node's driver owns it, beside
// the market's book.
package cardclaims

import (
	"fmt"
	"slices"
	"strings"
)

// Index maps hardware claims ("uuid:gpu-…", "serial:…") to the peers that
// make them.
type Index struct {
	byKey  map[string][]string // key → peers claiming it, sorted
	byPeer map[string][]string // peer → its keys, sorted
}

// New returns an empty index.
func New() *Index {
	return &Index{byKey: map[string][]string{}, byPeer: map[string][]string{}}
}

// Set replaces peer's claims with keys and returns the other peers whose
// conflicts may have changed (those that share a key peer claimed before
// or claims now), sorted.
func (x *Index) Set(peer string, keys []string) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	old := x.byPeer[peer]
	if slices.Equal(old, keys) {
		return nil
	}
	touched := map[string]bool{}
	for _, k := range old {
		x.byKey[k] = slices.DeleteFunc(x.byKey[k], func(p string) bool { return p == peer })
		for _, p := range x.byKey[k] {
			touched[p] = true
		}
		if len(x.byKey[k]) == 0 {
			delete(x.byKey, k)
		}
	}
	for _, k := range keys {
		for _, p := range x.byKey[k] {
			touched[p] = true
		}
		ps := append(x.byKey[k], peer)
		slices.Sort(ps)
		x.byKey[k] = ps
	}
	if len(keys) == 0 {
		delete(x.byPeer, peer)
	} else {
		x.byPeer[peer] = keys
	}
	out := make([]string, 0, len(touched))
	for p := range touched {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Remove forgets peer's claims (it left, or its ad expired) and returns
// the peers whose conflicts may have changed.
func (x *Index) Remove(peer string) []string { return x.Set(peer, nil) }

// Conflict says why peer is held back — which of its claims another peer
// makes too, and who — or "" when none is.
func (x *Index) Conflict(peer string) string {
	var first string
	var others []string
	n := 0
	for _, k := range x.byPeer[peer] {
		ps := x.byKey[k]
		if len(ps) < 2 {
			continue
		}
		n++
		if first == "" {
			first = k
			for _, p := range ps {
				if p != peer {
					others = append(others, shortID(p))
				}
			}
		}
	}
	if n == 0 {
		return ""
	}
	s := fmt.Sprintf("card %s is also claimed by %s", first, strings.Join(others, ", "))
	if n > 1 {
		s += fmt.Sprintf(" (and %d more of its cards are claimed twice)", n-1)
	}
	return s + ": both held back until one is gone"
}

// Len is the number of claims indexed.
func (x *Index) Len() int { return len(x.byKey) }

// shortID shortens a peer ID as the CLI prints it: "12*Qx3kLm".
func shortID(id string) string {
	if len(id) <= 10 {
		return id
	}
	return id[:2] + "*" + id[len(id)-6:]
}
