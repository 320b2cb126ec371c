// Package transfer moves a blob store's manifests and chunks between
// peers over libp2p streams: a holder serves what an Authorizer lets a
// peer read; a fetcher gets a manifest's missing chunks from several
// holders at once, checks each on arrival and stores it through the
// store's committing writer; a pusher has a peer fetch from it.
//
// # Usage
//
// The node registers the service on its host with its network's protocol
// and an Authorizer of its own, then fetches, pushes and asks:
//
//	svc, err := transfer.New(host, transfer.Config{
//		Protocol: protocol.ID("/gpumesh/" + network + "/blob/1"),
//		Store:    store,
//		Auth:     auth, // may peer P read manifest M? may P push M here, under which lease?
//		Logger:   log,
//	})
//	defer svc.Close()
//
//	// Restore a checkpoint: bring what is missing from every holder.
//	err = store.SetLease(blob.Lease{ID: "restore/" + job})
//	st, err := svc.Fetch(ctx, manifest, holders, "restore/"+job)
//	err = store.Restore(ctx, manifest, checkpointDir)
//
//	// Ship a checkpoint to R holders: each fetches only what it lacks.
//	for _, h := range holders { go svc.Push(ctx, h, manifest) } // and wait
//
//	// Does holder H have all of it?
//	lacking, err := svc.Lacks(ctx, h, manifest, nil)
//
// A fetch cut short keeps what it stored (its lease holds the manifest,
// and so the chunks present); run again, it fetches only the rest.
//
// # Protocol (version 1)
//
// A stream carries requests of one asker, answered in order: the asker
// may send the next before the last is answered (a fetch keeps Pipeline
// requests in flight on each stream, so a holder never waits for the
// next), and half-closes the stream when it has no more; the holder then
// closes it. A PUSH is the only request of its stream. Frames are a type
// byte, an unsigned varint length (shortest form) and the payload;
// digests are 32 raw bytes, numbers unsigned varints (shortest form). A
// frame of an unknown type, over its type's limit or not decoding ends
// the exchange, and the peer that sent it is dropped from the transfer.
//
//	GET   'G' scope, digest×n (1 ≤ n ≤ MaxBatch)   →  per digest, in order:
//	          OBJECT 'O' kind(1=chunk,2=manifest), digest, size
//	          then DATA 'D' frames (1 to MaxData bytes each) adding up to size
//	          or MISSING 'M' digest
//	HAS   'H' scope, digest×n                      →  HAVE 'V' n, bitmap (bit i: digest i held)
//	PUSH  'P' scope                                →  DONE 'K' chunks, bytes  (the receiver
//	                                                  fetched scope from the sender meanwhile)
//	any request                                    →  ERROR 'E' code, message (UTF-8, ≤ 1 KiB)
//
// The scope is a manifest digest: the unit of authorization. A GET or HAS
// is answered only if the Authorizer lets the peer read the scope (or
// this node is pushing it to that peer); each digest asked must be the
// scope itself or a chunk it lists (else ERROR bad request), and a holder
// that lacks the scope holds nothing under it. So a digest alone opens
// nothing, and no one learns what a store holds outside what they may
// read. Sizes are checked before any byte is read: a chunk over
// blob.MaxChunkSize, a manifest over blob.MaxManifestSize, or an object of
// another size than its manifest says is refused, and DATA past the
// announced size is a protocol error.
//
// Deadlines: every step (opening a stream, a request, its first answer,
// each frame after the previous, the next request) must happen within
// Config.Timeout, on both ends, or the stream is reset; a push's answer
// waits as long as the receiver's fetch takes. A fetch lets a stream go
// rather than leave it idle.
//
// # Concurrency and memory
//
// A Service is safe for concurrent use; it starts goroutines only for
// Fetch's stream workers (HolderStreams per holder) and committers
// (Commits), joined before Fetch returns, and is handed one per inbound
// stream by libp2p, which it counts, and bounds the requests being
// answered (MaxInbound). Memory is bounded by the streams, not the data:
// every object is streamed to disk in frames of at most MaxData bytes,
// with a buffer of about 320 KiB per stream; what waits to be committed
// is on disk, not in memory.
package transfer
