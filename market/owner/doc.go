// Package owner is the identity of a job owner: an ed25519 key pair, the
// owner ID that names its public key in text, and the two things an owner
// signs — its job specs (the market package builds that message) and its
// requests to a node's API (Proof). It is pure: no files, no clock, no
// network. The command line reads and writes key files; nodes verify.
//
// An owner ID is "o1" and 58 lower-case base32 characters: the 32-byte
// public key and a 4-byte checksum, so a mistyped ID in an allow list is
// refused instead of naming nobody. The public key is inside the ID, so an
// ID is all a verifier needs.
//
//	key, _ := owner.NewKey(rand.Reader)
//	text, _ := key.MarshalText()         // the key file's contents (keep it 0600)
//	key, _ = owner.ParseKey(text)
//	id := key.ID()                        // "o1..."
//
//	sig := key.Sign(owner.PurposeSpec, msg) // domain-separated by purpose
//	err := owner.Verify(id, owner.PurposeSpec, msg, sig)
//
//	p := owner.SignRequest(key, "DELETE", "/v1/jobs/j1", nil, now)
//	req.Header.Set(owner.Header, p.HeaderValue())
//	// on the node:
//	p, err := owner.ParseProof(req.Header.Get(owner.Header), req.Method, req.RequestURI, body)
//	err = p.Verify(now, owner.RequestWindow)
package owner
