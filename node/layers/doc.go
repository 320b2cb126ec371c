// Package layers shares image layers between the peers of a mesh, so that
// a LAN whose nodes start one image pulls each layer from its registry
// about once (the idea of Uber's Kraken and Dragonfly: a tracker that
// knows who holds or is pulling a piece, and peers that serve it).
//
// Every layer has a tracker: the first of the mesh's members by
// rendezvous hashing of its digest, so that every node asks the same one
// without a directory. A node that needs a layer asks its tracker, which
// answers with the peers that hold it (fetch it from them over
// node/blob/transfer, checked chunk by chunk and then whole against the
// layer's digest by node/image), or makes the asker the layer's puller
// (pull it from the registry, then say so), or — while another peer pulls
// it — holds the answer until that pull ends. A tracker keeps this in
// memory only: a restart forgets it, and a node whose tracker cannot be
// reached pulls from the registry as if alone.
//
// # Usage
//
//	svc, err := layers.New(layers.Config{Host: host, Protocol: "/gpumesh/<net>/layers/1",
//		Fetcher: xfer, Local: imageCache, Members: mesh.AlivePeers, Logger: log})
//	defer svc.Close()
//	imageConfig.Peers = svc // image.Peers
//
// # Protocol (version 1)
//
// A stream carries one request and its answer, each one JSON object of at
// most 64 KiB on a line:
//
//	{"op":"acquire","layer":"sha256:…"}  → {"holders":["12D3…",…],"manifest":"sha256:…"}
//	                                       or {"error":"…"}
//	                                       or {"pull":true}: pull it; then, on the same
//	                                          stream, {"op":"pulled",…} as below
//	{"op":"pulled","layer":"sha256:…","manifest":"sha256:…"} (or "error":"…")
//	                                     → {}: the sender now holds it (or failed)
//
// An acquire waits while another peer pulls the layer, up to
// Config.PullWait. The puller's acquire stream stays open until it
// reports: a stream that breaks (the puller went away) ends the pull, and
// a waiter becomes the puller.
//
// # Concurrency
//
// A Service is safe for concurrent use. Its goroutines are the stream
// handlers libp2p hands it, which Close ends and waits for.
package layers
