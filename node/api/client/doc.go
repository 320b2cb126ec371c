// Package client is an HTTP client of a gpumesh node's local API (package
// api): what `gpumesh submit`, `gpumesh jobs`, `gpumesh peers`, the demo and
// the end-to-end tests use to talk to a node.
//
// The usage loop of a job owner:
//
//	key, err := ownerkey.Load(path)          // gpumesh key create made it
//	c, err := client.New("127.0.0.1:7070", client.WithToken(token), client.WithOwnerKey(key))
//	up, err := c.UploadPayload(ctx, "./train") // sends only the chunks the node lacks
//	spec.Payload = &up.Ref
//	rec, err := c.Submit(ctx, spec)           // idempotent for one spec.ID
//	rec, err = c.Wait(ctx, rec.ID, client.WaitOptions{})
//	_, err = c.Logs(ctx, api.LogRequest{Job: rec.ID}, os.Stdout)
//
// Errors say what happened in terms a caller can act on:
//
//   - *UnreachableError: nothing answered at the address (the node is not
//     running there, or the address is wrong); nothing was done.
//   - *APIError: the node answered with an error status. errors.Is matches
//     ErrNotFound (404), ErrUnauthorized (401: the token, or the owner's
//     signature), ErrForbidden (403: another owner's job, or no owner) and
//     ErrBadRequest (400, 413, 415: the request was refused as bad input
//     and nothing changed); Field names the offending field of a bad job
//     spec. ErrNoRoom matches 507: the node's store has no room for what was
//     sent.
//
// With an owner key every request is signed (owner.SignRequest) and every
// spec Submit sends is signed for the node's mesh: the node serves and
// steers that owner's jobs only.
//   - anything else: the request broke off midway, and its outcome is unknown.
//
// A Client holds no goroutines of its own; it is safe for concurrent use.
package client
