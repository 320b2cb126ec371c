// Package gossip holds gpumesh's wire schema, its pubsub topics with
// validation, and the direct request/response protocols over libp2p streams.
// It knows nothing of auctions: it carries and checks messages.
package gossip
