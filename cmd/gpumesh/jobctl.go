package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

func newLogsCommand(e env) *cobra.Command {
	var (
		af      apiFlags
		follow  bool
		share   int
		stderr  bool
		attempt string
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's output",
		Long: `Print the output of one share of a job (share 0 unless --share says
otherwise): its standard output, or with --stderr its standard error. Any
node finds the job. -f keeps printing while the share runs, until it ends
or you press Ctrl-C; for a job that has not started yet, it first waits
for the share to start (saying so on stderr).

A share that was placed again (its node was lost, drained or preempted)
has one attempt per placement, numbered by epoch as ` + "`gpumesh job ID`" + ` lists
them. Without --attempt the output is the latest attempt's; --attempt EPOCH
prints an earlier one's, and --attempt all prints each attempt's in epoch
order under a header line naming its epoch and node (with -f it then
follows the latest). An attempt's output stays on the node that ran it: an
attempt whose node is gone says so, and the others are still printed.`,
		Example: `  gpumesh logs j3fk2x9q0m1z8c7vb -f
  gpumesh logs j3fk2x9q0m1z8c7vb --share 1 --stderr
  gpumesh logs j3fk2x9q0m1z8c7vb --attempt all`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkJobShare(id, share); err != nil {
				return err
			}
			var epoch uint64
			if attempt != "" && attempt != "all" {
				n, err := strconv.ParseUint(attempt, 10, 64)
				if err != nil || n == 0 {
					return usagef("--attempt %q: want an epoch (a number from 1, as gpumesh job lists) or all", attempt)
				}
				epoch = n
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			req := api.LogRequest{Job: id, Share: share, Epoch: epoch, Follow: follow, Stream: "stdout"}
			if stderr {
				req.Stream = "stderr"
			}
			ctx := cmd.Context()
			if attempt == "all" {
				err = allAttempts(ctx, e, c, req)
			} else {
				_, err = c.Logs(ctx, req, e.stdout)
				if follow && epoch == 0 && errors.Is(err, client.ErrNotFound) {
					// Right after submit the share may not run yet: wait for it.
					err = followWhenStarted(ctx, e, c, req, err)
				}
			}
			if err != nil && follow && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // Ctrl-C is how one stops following
			}
			if err != nil {
				return apiError(err, logsFlags)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing while the share runs")
	cmd.Flags().IntVar(&share, "share", 0, "the share whose output to print")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print standard error instead of standard output")
	cmd.Flags().StringVar(&attempt, "attempt", "", "the attempt whose output to print: its `EPOCH`, or all (default: the latest)")
	af.registerOwner(cmd)
	return cmd
}

// logsFlags names the flag behind each log request field.
var logsFlags = map[string]string{"share": "--share", "stream": "--stderr", "epoch": "--attempt"}

// allAttempts is logs --attempt all: every attempt of the share in epoch
// order, each under a header line; an attempt whose output cannot be read
// (its node is gone) says why in place of its output. It fails only when
// the job cannot be read, the caller may not read it, or no attempt's
// output could be read.
func allAttempts(ctx context.Context, e env, c *client.Client, req api.LogRequest) error {
	rec, err := c.Job(ctx, req.Job)
	if err != nil {
		return err
	}
	var attempts []market.Placement
	for _, p := range rec.Placements {
		if p.Share == req.Share && p.State != market.PlacementRejected {
			attempts = append(attempts, p)
		}
	}
	slices.SortFunc(attempts, func(a, b market.Placement) int { return cmp.Compare(a.Epoch, b.Epoch) })
	if len(attempts) == 0 {
		return fmt.Errorf("job %s (%s) has no attempt of share %d yet", req.Job, rec.State, req.Share)
	}
	out := &lineTracker{w: e.stdout}
	read := 0
	last := "" // why the last attempt's output could not be read
	for i, p := range attempts {
		if i > 0 {
			out.endLine()
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out, attemptHeader(p))
		r := req
		r.Epoch, r.Offset, r.Follow = p.Epoch, 0, req.Follow && i == len(attempts)-1
		_, err := c.Logs(ctx, r, out)
		switch {
		case err == nil:
			read++
		case ctx.Err() != nil, errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
			return err
		default:
			var ae *client.APIError
			last = err.Error()
			if errors.As(err, &ae) {
				last = ae.Message
			}
			out.endLine()
			fmt.Fprintf(out, "(no output: %s)\n", oneLine(last))
		}
	}
	if read == 0 {
		// Not wrapped: the node's answer is only the last attempt's.
		return fmt.Errorf("the output of none of the %s of job %s share %d could be read; the last: %s", text.Count(len(attempts), "attempt"), req.Job, req.Share, oneLine(last))
	}
	return nil
}

// attemptHeader names an attempt: "==> share 0 · epoch 2 · node 12*abcdef ·
// lost: renewals stopped <==".
func attemptHeader(p market.Placement) string {
	state := string(p.State)
	why := p.Reason
	if why == "" {
		why = string(p.Cause)
	}
	if why != "" {
		state += ": " + why
	}
	return fmt.Sprintf("==> share %d · epoch %d · node %s · %s <==", p.Share, p.Epoch, shortID(p.Node), oneLine(state))
}

// lineTracker is a writer that knows whether what it wrote ends a line.
type lineTracker struct {
	w       io.Writer
	midLine bool
}

func (l *lineTracker) Write(b []byte) (int, error) {
	n, err := l.w.Write(b)
	if n > 0 {
		l.midLine = b[n-1] != '\n'
	}
	return n, err
}

// endLine ends a line the output left open.
func (l *lineTracker) endLine() {
	if l.midLine {
		fmt.Fprintln(l)
	}
}

// followWhenStarted is logs -f on a share that had no output to give
// (notFound): when the job exists and has not run that share yet, it waits
// for the share to start and then follows it; otherwise it returns notFound.
func followWhenStarted(ctx context.Context, e env, c *client.Client, req api.LogRequest, notFound error) error {
	rec, err := c.Job(ctx, req.Job)
	if err != nil || !awaitsShare(rec, req.Share) {
		return notFound
	}
	fmt.Fprintf(e.stderr, "gpumesh: job %s is %s; waiting for share %d to start\n", req.Job, rec.State, req.Share)
	rec, err = c.WaitUntil(ctx, req.Job, client.WaitOptions{}, func(r market.JobRecord) bool { return shareStarted(r, req.Share) })
	if err != nil {
		return err
	}
	if !shareStarted(rec, req.Share) {
		why := ""
		if rec.Reason != "" {
			why = ": " + oneLine(rec.Reason)
		}
		return fmt.Errorf("job %s %s before share %d started%s", req.Job, rec.State, req.Share, why)
	}
	_, err = c.Logs(ctx, req, e.stdout)
	return err
}

// awaitsShare reports whether the job may still start the share: it has not
// started it and is still being placed.
func awaitsShare(rec market.JobRecord, share int) bool {
	if shareStarted(rec, share) {
		return false
	}
	switch rec.State {
	case market.JobPending, market.JobBidding, market.JobPlacing, market.JobRerouting:
		return true
	}
	return false
}

// shareStarted reports whether an attempt of the share has started.
func shareStarted(rec market.JobRecord, share int) bool {
	return slices.ContainsFunc(rec.Placements, func(p market.Placement) bool {
		return p.Share == share && (p.State == market.PlacementRunning || !p.StartedAt.IsZero())
	})
}

func newCancelCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job",
		Long: `Cancel a job through its coordinator: every running share is stopped
(SIGTERM, then SIGKILL after the grace period) and billing stops. Prints the
job's state after: cancelled, or the state it had already ended in.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := af.jobClient(e, id)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			rec, err := c.Cancel(cmd.Context(), id)
			if err != nil {
				return apiError(err, nil)
			}
			if asJSON {
				return writeJSON(e.stdout, rec)
			}
			if rec.State != market.JobCancelled && rec.State.Terminal() {
				fmt.Fprintf(e.stderr, "gpumesh: job %s had already ended\n", id)
			}
			_, err = fmt.Fprintln(e.stdout, rec.State)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job's record as JSON")
	af.registerOwner(cmd)
	return cmd
}

func newScaleCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "scale ID CARDS",
		Short: "Change an elastic job's number of cards",
		Long: `Ask an elastic job (submitted with --elastic MIN:MAX) to hold CARDS cards.
Growing places new shares by auction. Shrinking stops whole shares and
starts nothing: a share keeps its cards for as long as it runs, so when no
whole shares add up to the cards to give back, the job keeps more than
CARDS (two 4-card shares scaled to 2 keep 4), and scale says so on stderr.
Prints the job's card count and state after.

A count outside the job's elastic range is refused with the range (exit
status 2); an ended job cannot be scaled (exit status 1, with its state).`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkJobID(id); err != nil {
				return err
			}
			cards, err := strconv.Atoi(args[1])
			if err != nil || cards < 1 || cards > market.MaxCards {
				return usagef("CARDS %q: want a whole number from 1 to %d", args[1], market.MaxCards)
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			rec, err := c.Scale(cmd.Context(), id, cards)
			if err != nil {
				return apiError(err, map[string]string{"cards": "CARDS"})
			}
			if rec.Cards > cards {
				fmt.Fprintf(e.stderr, "gpumesh: job %s holds %d cards, not the %d asked: a scale-down stops only whole shares and starts nothing, and stopping another share would leave fewer than %d\n",
					rec.ID, rec.Cards, cards, cards)
			}
			if asJSON {
				return writeJSON(e.stdout, rec)
			}
			_, err = fmt.Fprintf(e.stdout, "%s: %s (%s)\n", rec.ID, text.Count(rec.Cards, "card"), rec.State)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job's record as JSON")
	af.registerOwner(cmd)
	return cmd
}
