// Package blob is a node's content-addressed store (the workload plane of
// DESIGN.md): payloads, checkpoints, outputs and image layers are all
// trees of content-defined chunks named by their SHA-256, described by
// manifests that are themselves stored by digest. Any peer holding an
// object can serve it and no one can swap it: nothing enters the store
// unless its bytes hash to its name.
//
// # Usage
//
// A runner stores a checkpoint directory, keeps it with a lease, and swaps
// the lease to the newest one; a restore writes a tree into an empty
// directory:
//
//	st, err := blob.Open(blob.Config{Dir: filepath.Join(dataDir, "blobs"), Limit: storeMax, Logger: log})
//	defer st.Close()
//
//	err = st.SetLease(blob.Lease{ID: "ckpt/" + job + "/0"}) // create, or reset
//	put, err := st.Put(ctx, checkpointDir, "ckpt/"+job+"/0")
//	// put.Manifest names the tree; put.NewBytes is what a peer holding the
//	// previous checkpoint still needs. Hand put.Manifest to the
//	// coordinator, ship it with package transfer, then keep only it:
//	err = st.SetLease(blob.Lease{ID: "ckpt/" + job + "/0", Manifests: []blob.Digest{put.Manifest}})
//
//	// Elsewhere, once transfer.Fetch brought the manifest and its chunks:
//	err = st.Restore(ctx, manifest, emptyDir)
//
//	// When the job ends:
//	err = st.DeleteLease("ckpt/" + job + "/0")
//
// The store never decides what to keep on its own: leases do. Objects no
// lease keeps stay as a cache (for deduplication) until the limit needs
// their room; they go oldest first.
//
// # On disk
//
//	DIR/chunks/ab/abcdef…      one file per chunk, named by the hex of its digest,
//	                           fanned out by its first two hex digits (files 0600)
//	DIR/manifests/ab/abcdef…   one file per manifest (its canonical JSON)
//	DIR/ingest/                writers' temporary files; emptied at Open
//	DIR/leases.db              bbolt: the leases and the layout version
//
// An object is written to ingest/, synced, checked against its digest and
// renamed into place, and its directory synced: it is whole under its name
// or absent, whatever the crash. The exception is a copy that can be
// fetched again (Writer.SkipSync: a restore's, a cache's), left to the
// kernel's write-back: a crash may leave it torn under its name, and it
// is found out when read, since the store hashes every object it did not
// write since it opened before a restore copies it. The index of objects
// (size and age) is rebuilt from the directories at Open, so it cannot
// disagree with them. A lease is on disk when SetLease, AddToLease or
// DeleteLease returns. The SetLease and AddToLease calls that come while
// another commits go together in the next transaction, with one sync for
// all: many attempts that end together keep their outputs at the cost of
// one. Collection deletes all the expired leases in one transaction.
//
// # Chunking
//
// restic's content-defined chunker (Rabin fingerprints over a 64-byte
// window) with the fixed Polynomial, chunks of MinChunkSize (512 KiB) to
// MaxChunkSize (8 MiB), about 1 MiB on average. Every node cuts the same
// bytes at the same places, so an edit to a file moves only the chunks
// around it, and what is new after an edit is what moves between peers.
//
// # Limits and collection
//
// Config.Limit bounds the bytes stored; by default DefaultLimit of the
// disk (half of what the store could use, at most a quarter of the disk).
// A write that would cross it first collects unkept objects, oldest
// first, and fails with a *QuotaError when what is kept leaves no room: it
// never removes anything a lease keeps, nor what a Put, Restore or fetch in
// flight uses. GC collects everything unkept on demand. Usage reports the
// figures.
//
// # Concurrency
//
// A Store is safe for concurrent use; a Writer is used by one goroutine.
// The only goroutines the package starts are a Put's own (a few that
// store its chunks while it cuts the next), ended before Put returns.
package blob
