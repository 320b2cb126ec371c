package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

func newLogsCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		follow bool
		share  int
		stderr bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's output",
		Long: `Print the output of one share of a job (share 0 unless --share says
otherwise): its standard output, or with --stderr its standard error. Any
node finds the job. -f keeps printing while the share runs, until it ends
or you press Ctrl-C; for a job that has not started yet, it first waits
for the share to start (saying so on stderr).`,
		Example: `  gpumesh logs j3fk2x9q0m1z8c7vb -f
  gpumesh logs j3fk2x9q0m1z8c7vb --share 1 --stderr`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkJobID(id); err != nil {
				return err
			}
			if share < 0 {
				return usagef("--share: must be 0 or more, got %d", share)
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			req := api.LogRequest{Job: id, Share: share, Follow: follow, Stream: "stdout"}
			if stderr {
				req.Stream = "stderr"
			}
			ctx := cmd.Context()
			_, err = c.Logs(ctx, req, e.stdout)
			if follow && errors.Is(err, client.ErrNotFound) {
				// Right after submit the share may not run yet: wait for it.
				err = followWhenStarted(ctx, e, c, req, err)
			}
			if err != nil && follow && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // Ctrl-C is how one stops following
			}
			if err != nil {
				return apiError(err, map[string]string{"share": "--share", "stream": "--stderr"})
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing while the share runs")
	cmd.Flags().IntVar(&share, "share", 0, "the share whose output to print")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print standard error instead of standard output")
	af.registerOwner(cmd)
	return cmd
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
			if err := checkJobID(id); err != nil {
				return err
			}
			c, err := af.client(e)
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
			_, err = fmt.Fprintf(e.stdout, "%s: %d cards (%s)\n", rec.ID, rec.Cards, rec.State)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job's record as JSON")
	af.registerOwner(cmd)
	return cmd
}
