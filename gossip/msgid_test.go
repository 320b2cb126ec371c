package gossip

import (
	"testing"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
)

func TestMessageID(t *testing.T) {
	id := func(from, seqno string) string {
		return messageID(&pubsubpb.Message{From: []byte(from), Seqno: []byte(seqno)})
	}
	a := id("peer-a", "\x00\x01")
	if len(a) != messageIDSize || a != id("peer-a", "\x00\x01") {
		t.Fatal("IDs are 16 bytes and deterministic")
	}
	// The author is length-prefixed: moving bytes between author and seqno
	// gives another ID.
	for _, other := range []string{id("peer-a", "\x00\x02"), id("peer-b", "\x00\x01"), id("peer-a\x00", "\x01")} {
		if other == a {
			t.Fatal("distinct (author, seqno) pairs share an ID")
		}
	}
}
