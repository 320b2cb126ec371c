// Package image brings the OCI images jobs run onto a node and readies
// their root file systems: resolve a tag to its digest (on the owner's
// machine, before the spec is signed: Resolver), pull an image by digest
// from its registry or its mirrors, or from peers that hold its layers
// (Peers), keep every layer as a blob in the node's content store
// (node/blob: one file per layer, so the store's quota and collection
// apply), and unpack an image into a read-only root file system shared by
// the attempts that run it.
//
// # Usage
//
//	c, err := image.Open(image.Config{Dir: dataDir + "/images", Blobs: store,
//		Keychain: image.DockerConfig(dockerConfigDir), Mirrors: mirrors,
//		MaxBytes: imageCacheMax, Logger: log})
//	img, err := c.Pull(ctx, "docker.io/library/ubuntu@sha256:…") // by digest, as a spec names it
//	root, err := c.Acquire(ctx, img)                              // unpacked once, then shared
//	defer root.Release()
//	proc, err := img.Process(root.Dir(), command)                 // argv, env, cwd, user
//
// # Trust
//
// Nothing enters the store or a root file system unless its digest
// matches: a manifest by the digest the spec names, the config and each
// layer by the digests the manifest names (checked while they stream in,
// whoever serves them: registry, mirror or peer). Unpacking writes only
// beneath the root (through an os.Root: no "..", no absolute path, no
// link leads out), refuses hard links to absolute paths, leaves out
// device nodes and named pipes, and drops setuid and setgid bits.
//
// # On disk
//
//	DIR/layers/<hex>       the blob manifest holding layer sha256:<hex>
//	DIR/images/<hex>.json  the image record of manifest sha256:<hex> (its
//	                       config and layers), for this node's platform
//	DIR/rootfs/<hex>/      the unpacked root file system of image <hex>
//	DIR/rootfs/<hex>.size  its size in bytes, written last: it is complete
//
// # Concurrency
//
// A Cache is safe for concurrent use. Pull starts a few goroutines per
// call (one per layer it fetches, at most Config.Parallel), joined before
// it returns; two pulls of the same image at once share the work.
package image
