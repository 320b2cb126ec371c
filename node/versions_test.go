package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// A peer that sends a market message of a newer wire version is named in
// the receiver's status, instead of its messages being dropped unseen.
func TestStatusNamesAPeerOfANewerVersion(t *testing.T) {
	sm := newSimMesh(t, "h100-sxm-80g:1", "h100-sxm-80g:1")
	a, b := sm.nodes[0], sm.nodes[1]
	newer := fmt.Sprintf(`{"v":%d,"from":%q,"to":%q,"type":"release","payload":{"job":"j1","lease":"L1","priority":3}}`,
		market.WireVersion+1, a.id, b.id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.direct.Send(ctx, b.id, gossip.Out{Kind: kindMarket, Data: []byte(newer)}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("peer %s speaks market wire version %d; this node reads %d and refuses its messages: upgrade gpumesh on this node",
		a.id, market.WireVersion+1, market.WireVersion)
	eventually(t, 5*time.Second, "b's status names a as newer", func() bool {
		st, err := b.Status(ctx)
		if err != nil {
			return false
		}
		for _, w := range st.(*api.Status).Warnings {
			if w == want {
				return true
			}
		}
		return false
	})
	st, _ := a.Status(ctx)
	for _, w := range st.(*api.Status).Warnings {
		if strings.Contains(w, "wire version") {
			t.Errorf("a, which sent the message, warns: %s", w)
		}
	}
}
