package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/spf13/cobra"
)

func newEarningsCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
		since  string
	)
	cmd := &cobra.Command{
		Use:   "earnings",
		Short: "What this supplier is owed, by owner and job, from its signed receipts",
		Long: `Sum what a supplier node is owed from its own usage receipts: for every
attempt its cards ran, the latest receipt its coordinator countersigned,
by job owner and by job. UNCONFIRMED is what the latest receipts the node
issued add beyond the countersigned ones (an attempt still running, or an
acknowledgement not back yet). The receipts are on the node's disk and
survive restarts; gpumesh bill JOB --verify checks them against the job's
bill.

The LEDGER line is what gpumesh status's EARNED counts in all, from the
attempts' own usage: it runs ahead of the receipts by the usage since each
attempt's latest receipt (at most 5 seconds of each), and counts the shares a
coordinator ran on its own cards, which have no receipts.

--since takes a duration (24h, 7d) or a date (2026-12-01, local midnight) or
an RFC 3339 time, and counts the attempts with a receipt signed since.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			out, err := c.ReceiptEarnings(cmd.Context(), from)
			if err != nil {
				return apiError(err, nil)
			}
			if asJSON {
				return writeJSON(e.stdout, out)
			}
			return writeReceiptEarnings(e.stdout, out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sums as JSON")
	cmd.Flags().StringVar(&since, "since", "", "count only attempts with receipts since: a duration (24h, 7d), a date (2026-12-01) or an RFC 3339 time")
	af.register(cmd)
	return cmd
}

// parseSince reads --since relative to now; "" is the beginning.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--since %q: want a duration (24h, 7d), a date (2026-12-01) or an RFC 3339 time", s)
}

func writeReceiptEarnings(w io.Writer, e api.ReceiptEarnings) error {
	span := "in all"
	if !e.Since.IsZero() {
		span = "since " + e.Since.Local().Format(time.DateTime)
	}
	earned := func(x api.Earned) string {
		return fmt.Sprintf("%s CNY (%.2f card-hours)", cny(x.CNY), x.CardSeconds/3600)
	}
	fmt.Fprintf(w, "OWED %s · %s countersigned · %s unconfirmed\n", span, earned(e.Total), earned(e.Unconfirmed))
	fmt.Fprintf(w, "LEDGER %s in all (gpumesh status)\n", earned(e.Ledger))
	if len(e.ByJob) == 0 {
		_, err := fmt.Fprintf(w, "\nno receipts %s: this node's cards ran no attempt for another coordinator\n", span)
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OWNER\tJOBS\tCNY\tUNCONFIRMED\tCARD-HOURS\t")
	for _, o := range e.ByOwner {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.2f\t\n", shortOwner(o.Owner), o.Jobs, cny(o.Earned.CNY), cny(o.Unconfirmed.CNY), (o.Earned.CardSeconds+o.Unconfirmed.CardSeconds)/3600)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "JOB\tOWNER\tATTEMPTS\tCNY\tUNCONFIRMED\tLAST RECEIPT\t")
	for _, j := range e.ByJob {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t\n", j.Job, shortOwner(j.Owner), j.Attempts, cny(j.Earned.CNY), cny(j.Unconfirmed.CNY), j.Last.Local().Format(time.DateTime))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s, %s\n", text.Count(len(e.ByJob), "job"), text.Count(len(e.ByOwner), "owner"))
	return err
}
