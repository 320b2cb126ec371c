package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/receipts"
	"github.com/spf13/cobra"
)

func newBillCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
		verify bool
	)
	cmd := &cobra.Command{
		Use:   "bill ID",
		Short: "Show a job's bill with its signed usage receipts, and check them",
		Long: `Show a job's bill, asked of any node: what each attempt used and cost, and the
usage receipts that prove it. Each receipt is signed by the node that ran
the attempt and countersigned by the job's coordinator; a runner sends one
every 5 seconds and one when the attempt ends, and the coordinator bills only
what receipts state. Every placement's latest receipt travels in the job's
record (any node has it); the coordinator holds the whole chain.

--verify checks the bill here, trusting no node: every signature (peer IDs
are the public keys), that each attempt's receipts follow each other, that
each receipt is of an attempt the job placed, signed by its runner and not
dated after its share was placed again (epoch fencing), and that the bill's
sums are the receipts'. It exits 1 and names each problem when one fails.
--json prints the bill, with the decoded receipts (and the check's findings
with --verify).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := af.jobClient(e, id)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			b, err := c.Bill(cmd.Context(), id)
			if err != nil {
				return apiError(err, nil)
			}
			rs, bad := decodeReceipts(b.Receipts)
			var rep *receipts.Report
			if verify {
				r := receipts.Verify(receipts.Bill{Job: b.Job, Coordinator: b.Coordinator, Placements: b.Placements,
					CardSeconds: b.CardSeconds, CostCNY: b.CostCNY, Receipts: rs})
				for _, msg := range bad {
					r.Problems = append(r.Problems, msg)
				}
				rep = &r
			}
			if asJSON {
				if err := writeJSON(e.stdout, billJSON{Bill: b, Decoded: rs, Verify: rep}); err != nil {
					return err
				}
			} else if err := writeBill(e.stdout, b, rs, rep); err != nil {
				return err
			}
			if rep != nil && !rep.OK() {
				return exitCodeError{exitError}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the bill and its decoded receipts as JSON")
	cmd.Flags().BoolVar(&verify, "verify", false, "check every signature, the epoch fencing and the sums here; exit 1 if any fails")
	af.registerOwner(cmd)
	return cmd
}

// billJSON is gpumesh bill --json's output.
type billJSON struct {
	api.Bill
	Decoded []receipts.Receipt `json:"decoded_receipts"`
	Verify  *receipts.Report   `json:"verify,omitempty"`
}

// decodeReceipts decodes a bill's receipts; one that does not decode is
// named in bad.
func decodeReceipts(raw [][]byte) (rs []receipts.Receipt, bad []string) {
	rs = []receipts.Receipt{}
	for i, b := range raw {
		r, err := receipts.Unmarshal(b)
		if err != nil {
			bad = append(bad, fmt.Sprintf("receipt #%d of the bill: %v", i+1, err))
			continue
		}
		rs = append(rs, r)
	}
	return rs, bad
}

func writeBill(w io.Writer, b api.Bill, rs []receipts.Receipt, rep *receipts.Report) error {
	fmt.Fprintf(w, "JOB %s · %s · owner %s · coordinator %s\n", b.Job, b.State, shortOwner(b.Owner), shortID(b.Coordinator))
	fmt.Fprintf(w, "BILL %s CNY (%.1f card-seconds), %s, %s (from %s)\n\n", cny(b.CostCNY), b.CardSeconds,
		text.Count(len(b.Placements), "placement"), text.Count(len(rs), "receipt"), shortID(b.From))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARE\tEPOCH\tNODE\tCARDS\tSTATE\tPRICE (CNY/h)\tCARD-SECONDS\tCOST (CNY)\tRECEIPTS")
	for _, p := range b.Placements {
		n, last := 0, ""
		for _, r := range rs {
			if r.Share == p.Share && r.Epoch == p.Epoch {
				n++
				last = fmt.Sprintf(" (latest #%d", r.Seq)
				if r.Final {
					last += ", final"
				}
				last += ")"
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%.1f\t%s\t%d%s\n", p.Share, p.Epoch, shortID(p.Node), len(p.Cards),
			cell(string(p.State)), cny(p.PriceCNY), p.CardSeconds, cny(p.CostCNY), n, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rs) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RECEIPT\tSHARE\tEPOCH\tSIGNED\tCARD-SECONDS\tCOST (CNY)\tRUNNER\tCOORDINATOR")
		for _, r := range rs {
			signed := r.At.Local().Format(time.DateTime)
			if r.Final {
				signed += " final"
			}
			co := shortID(r.Coordinator)
			if len(r.CoordSig) == 0 {
				co += " (not countersigned)"
			}
			fmt.Fprintf(tw, "#%d\t%d\t%d\t%s\t%.1f\t%s\t%s\t%s\n", r.Seq, r.Share, r.Epoch, signed, r.CardSeconds, cny(r.CostCNY()), shortID(r.Runner), co)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if rep == nil {
		return nil
	}
	fmt.Fprintln(w)
	switch {
	case rep.OK() && rep.Unreceipted > 0:
		fmt.Fprintf(w, "VERIFIED %s, %d signatures; %.1f of the bill's %.1f card-seconds rest on the coordinator's word alone (it ran them on its own cards)\n",
			text.Count(rep.Receipts, "receipt"), rep.Signatures, rep.Unreceipted, rep.CardSeconds)
	case rep.OK():
		fmt.Fprintf(w, "VERIFIED %s, %d signatures: the bill is the sum of its receipts (%s CNY, %.1f card-seconds)\n",
			text.Count(rep.Receipts, "receipt"), rep.Signatures, cny(rep.CostCNY), rep.CardSeconds)
	default:
		fmt.Fprintf(w, "NOT VERIFIED: %s\n", text.Count(len(rep.Problems), "problem"))
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "  %s\n", oneLine(p))
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  note: %s\n", oneLine(n))
	}
	return nil
}

// shortOwner shortens an owner ID: "o1abcdefgh…".
func shortOwner(id string) string {
	if len(id) <= 12 {
		return cell(id)
	}
	return id[:10] + "…"
}
