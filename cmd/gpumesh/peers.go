package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node/api"
)

func newPeersCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the mesh's members as a node sees them",
		Long: `List the members of the mesh as the node sees them, itself first (marked
"(self)"): peer ID (shortened as in the node's logs), state (alive, suspect,
dead, left), region, cards and free cards, card models, when it was last
heard from, and its first address.

--json prints the full list: every address (multiaddrs ending in /p2p/ID that
another node can --join), full peer IDs, and "self": true on the node itself.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			peers, err := c.Peers(cmd.Context())
			if err != nil {
				return apiError(err, nil)
			}
			if peers == nil {
				peers = []api.Peer{}
			}
			if asJSON {
				return writeJSON(e.stdout, peers)
			}
			return writePeersTable(e.stdout, peers, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of peers")
	af.register(cmd)
	return cmd
}

func writePeersTable(w io.Writer, peers []api.Peer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREGION\tCARDS\tFREE\tMODELS\tLAST HEARD\tCONN\tADDR")
	for _, p := range peers {
		id := shortID(p.ID)
		heard := "never"
		switch {
		case p.Self:
			id += " (self)"
			heard = "-"
		case !p.LastHeard.IsZero():
			heard = age(now, p.LastHeard) + " ago"
		}
		conn := p.Conn
		switch {
		case p.Self:
			conn = "-"
		case conn == "":
			conn = "none"
		}
		addr := "-"
		if len(p.Addrs) > 0 {
			addr = p.Addrs[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", id, cell(p.State), cell(p.Region), p.Cards, p.FreeCards,
			cell(peerModels(p)), heard, conn, cell(addr))
	}
	return tw.Flush()
}

// peerModels lists a peer's models, each simulated one marked so:
// "h100-sxm-80g(simulated),rtx4090-24g".
func peerModels(p api.Peer) string {
	out := make([]string, len(p.Models))
	for i, m := range p.Models {
		out[i] = m
		if slices.Contains(p.SimulatedModels, m) {
			out[i] += "(simulated)"
		}
	}
	return strings.Join(out, ",")
}
