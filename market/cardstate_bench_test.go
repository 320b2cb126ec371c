package market_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// What a node's driver reads on every turn that changed no ad, to see
// whether its cards' states changed since its last ad: every card copied
// (Cards, as before) or the states alone (EachCardState), for 64 cards
// (go test -run '^$' -bench CardStateKey ./market/).
func BenchmarkCardStateKey(b *testing.B) {
	n := newNode(b, "n0", "a100-80g:64")
	key := func(b *strings.Builder, id string, st market.CardState) {
		b.WriteString(id)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(len(st)))
		b.WriteByte(';')
	}
	b.Run("copy-every-card", func(b *testing.B) {
		for b.Loop() {
			var sb strings.Builder
			for _, c := range n.Cards() {
				key(&sb, c.Card.ID, c.State)
			}
			_ = sb.String()
		}
	})
	b.Run("states-alone", func(b *testing.B) {
		for b.Loop() {
			var sb strings.Builder
			n.EachCardState(func(id string, st market.CardState) { key(&sb, id, st) })
			_ = sb.String()
		}
	})
}
