// Package gangnet gives the shares of a gang job a network of their own:
// each share has an address on a subnet private to the job (Subnet, Addr),
// inside its own network namespace, and the TCP connections between the
// shares travel over libp2p streams between the nodes that run them
// (direct or relayed), on the protocol /gpumesh/<network>/v1/gangnet.
// Nothing else reaches those addresses, and the shares reach nothing
// through them but each other.
//
// The executor (node/executor's PrivateNet) puts the address in the
// share's namespace and redirects the share's TCP to the rest of the
// subnet to a listener the node holds there. This package takes it from
// there:
//
//	svc, _ := gangnet.New(gangnet.Config{Host: h, Network: "gpumesh"})
//	defer svc.Close()
//	svc.Add(gangnet.Member{Job: id, Rank: 1, Roster: roster,
//		Listener: run.PrivateListener(), Dest: executor.OriginalDst, Dial: run.DialPrivate})
//	defer svc.Remove(id, 1, epoch)
//
// Each connection the share opens to another share's address (its
// original destination, Dest) is carried to the node of that rank in the
// roster, which checks that the stream comes from the node the roster
// names for the sender, for the same job, ranks, shares and epochs as its
// own share's roster (the coordinator's, from the gang's Start: an
// attempt of a stale epoch or of another job is refused), then dials the
// port on its share's address inside its namespace (Dial) and splices the
// two. A share whose port does not listen yet is dialled again for
// Config.DialWait, as a rendezvous client would retry: the connecting
// share's connect has already succeeded (the node's listener accepted
// it), and a port that never listens resets the connection.
//
// Shares of one gang on one node reach each other without a stream.
package gangnet
