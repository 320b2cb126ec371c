// Package tunnel carries an owner into a running job: exec (a command in
// the job's sandbox, with a terminal or streams), port-forward (bytes to a
// port inside the job's network) and service requests (HTTP to a ready
// replica), over one libp2p stream protocol, /gpumesh/<network>/v1/tunnel,
// from whichever node the owner talks to, to the node that runs the share
// (direct or relayed).
//
// A tunnel starts with a Request (a length-prefixed JSON frame) carrying
// the owner's signed API request and its body; the node that runs the job
// resolves the attempt (Jobs), checks the proof against the job's owner and
// the tunnel's kind (authorize), and answers a Response. Then:
//
//	exec     the frames of package wire, both ways, until the exit frame
//	forward  the connection's bytes, both ways, half-closes included
//	service  the same, to the service's port on a ready replica
//
// The node wires three pieces:
//
//	svc, _ := tunnel.New(tunnel.Config{Host: h, Network: "gpumesh", Jobs: jobs})
//	defer svc.Close()                       // cuts the tunnels it serves, waits
//	c, resp, err := svc.Open(ctx, runner, req) // a tunnel to the job's node
//
//	proxy, _ := tunnel.NewProxy(tunnel.ProxyConfig{Service: svc, Lookup: lookup})
//	proxy.ServeHTTP(w, r, tunnel.ProxyRequest{Job: id, Path: "/v1/models", Caller: who, Proof: &p})
//
//	prober := tunnel.NewProber(tunnel.ProberConfig{OnChange: tell})
//	prober.Set(replicasRunningHere)         // probes each until it is dropped
//	defer prober.Close()
//
// A tunnel whose job runs on the node that opens it skips the stream: an
// exec goes through an in-process pipe, and a forward or service tunnel is
// the connection to the job's port itself.
package tunnel
