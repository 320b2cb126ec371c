package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/blob"
)

func newJobsCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List your jobs",
		Long: `List your jobs, newest first, asked of any node: it gathers them from the
members that coordinate jobs and hold their records, so a node that joined
a minute ago lists them as well as their coordinator. When some member does
not answer in time, a note on stderr names it: jobs only it holds are
missing from the list. COST is the bill so far in CNY; EPOCH counts
placements (it rises each time a share is placed again). --json prints the
records as a JSON array (the note stays on stderr).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			list, err := c.JobList(cmd.Context())
			if err != nil {
				return apiError(err, nil)
			}
			jobs := list.Jobs
			if len(list.Unanswered) > 0 {
				ids := make([]string, len(list.Unanswered))
				for i, id := range list.Unanswered {
					ids[i] = shortID(id)
				}
				asked := ""
				if list.Asked > 0 {
					asked = fmt.Sprintf(" of %d", list.Asked)
				}
				fmt.Fprintf(e.stderr, "gpumesh: %d%s nodes asked did not answer in time (%s): jobs only they hold are not listed\n",
					len(ids), asked, strings.Join(ids, ", "))
			}
			slices.SortStableFunc(jobs, func(a, b market.JobRecord) int {
				if c := b.SubmittedAt.Compare(a.SubmittedAt); c != 0 {
					return c
				}
				return cmp.Compare(a.ID, b.ID)
			})
			if asJSON {
				if jobs == nil {
					jobs = []market.JobRecord{}
				}
				return writeJSON(e.stdout, jobs)
			}
			return writeJobsTable(e.stdout, jobs, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of job records")
	af.registerOwner(cmd)
	return cmd
}

func writeJobsTable(w io.Writer, jobs []market.JobRecord, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCARDS\tEPOCH\tCOST (CNY)\tAGE")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", j.ID, cell(j.Spec.Name), cell(string(j.State)), j.Cards, j.Epoch, cny(j.CostCNY), age(now, j.SubmittedAt))
	}
	return tw.Flush()
}

func newJobCommand(e env) *cobra.Command {
	var (
		af      apiFlags
		asJSON  bool
		explain bool
	)
	cmd := &cobra.Command{
		Use:   "job ID",
		Short: "Show a job: state, placements, cost",
		Long: `Show one job, asked of any node: its state and why, epoch and coordinator
term, the bill so far, its exit code, and its placements (one line per
attempt at a share: node, cards, model, state, price per card-hour, cost).

--explain adds how its latest placement round went: what it needed, how many
nodes were asked and bid, the clearing price, and why each candidate lost
(SCORE is a candidate's effective price in CNY per compute-unit hour, lower
is better; STAGE "book" is candidate selection, "bid" is clearing). A
supplier that lost shares under this coordinator before ranks as if its MTBF
were lower; its DETAIL says so ("track record here: 3 of 5 attempts lost").
--json prints the whole record (explanation included).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := af.jobClient(e, id)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			rec, err := c.Job(cmd.Context(), id)
			if err != nil {
				return apiError(err, nil)
			}
			if asJSON {
				return writeJSON(e.stdout, rec)
			}
			if err := writeJob(e.stdout, rec, time.Now()); err != nil {
				return err
			}
			if explain {
				fmt.Fprintln(e.stdout)
				return writeExplanation(e.stdout, rec.Explanation)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job's record as JSON")
	cmd.Flags().BoolVar(&explain, "explain", false, "show how the latest placement round went and why candidates lost")
	af.registerOwner(cmd)
	return cmd
}

// checkJobID refuses an argument that cannot be a job ID before anything is
// asked of a node.
func checkJobID(id string) error {
	if err := market.ValidateJobID(id); err != nil {
		return usagef("job ID %q: %s", id, strings.TrimPrefix(err.Error(), market.ErrInvalidJobID.Error()+": "))
	}
	return nil
}

// checkJobShare checks a job ID and a --share number.
func checkJobShare(id string, share int) error {
	if err := checkJobID(id); err != nil {
		return err
	}
	if share < 0 {
		return usagef("--share: must be 0 or more, got %d", share)
	}
	return nil
}

func writeJob(w io.Writer, j market.JobRecord, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	line("ID", j.ID)
	if j.Spec.Name != "" {
		line("NAME", oneLine(j.Spec.Name))
	}
	line("STATE", string(j.State))
	if j.Reason != "" {
		line("REASON", oneLine(j.Reason))
	}
	line("CARDS", fmt.Sprint(j.Cards))
	line("EPOCH", fmt.Sprintf("%d (term %d)", j.Epoch, j.Term))
	line("COORDINATOR", cell(shortID(j.Coordinator)))
	line("COST", fmt.Sprintf("%s CNY (%.0f card-seconds)", cny(j.CostCNY), j.CardSeconds))
	line("MAX PRICE", fmt.Sprintf("%s CNY per card-hour", cny(j.Spec.MaxPriceCNY)))
	line("EXIT CODE", exitCode(j.ExitCode))
	if j.Restarts > 0 {
		line("RESTARTS", fmt.Sprint(j.Restarts))
	}
	line("SUBMITTED", stamp(now, j.SubmittedAt))
	if !j.RunningAt.IsZero() {
		line("RUNNING", stamp(now, j.RunningAt))
	}
	if !j.EndedAt.IsZero() {
		line("ENDED", stamp(now, j.EndedAt))
	}
	for _, im := range j.Spec.Images {
		for_ := "every vendor"
		if im.Vendor != "" {
			for_ = string(im.Vendor)
		}
		line("IMAGE", im.Ref+" ("+for_+")")
	}
	switch {
	case len(j.Spec.Command) > 0:
		line("COMMAND", oneLine(strings.Join(j.Spec.Command, " ")))
	case len(j.Spec.Images) > 0:
		line("COMMAND", "the image's own")
	default:
		line("COMMAND", "")
	}
	if j.Spec.AllowSimulated {
		line("SIMULATED", "allowed (--allow-simulated): the job may run on simulated cards")
	}
	if cp := newestCheckpoint(j); cp != nil {
		line("CHECKPOINT", fmt.Sprintf("share %d epoch %d, %s (%s new), on %s, %s",
			cp.Share, cp.Epoch, text.Bytes(cp.Bytes), text.Bytes(cp.NewBytes), text.Count(len(cp.Holders), "node"), stamp(now, cp.At)))
	}
	if sv := j.Spec.Service; sv != nil {
		probe := fmt.Sprintf("TCP connect to %d", sv.Port)
		if sv.ReadyPath != "" {
			probe = "GET " + sv.ReadyPath
		}
		reach := "/v1/jobs/" + j.ID + "/http/ on any node (owner only)"
		if sv.Public {
			reach += ", and /" + j.ID + "/ on every --ingress"
		}
		line("SERVICE", fmt.Sprintf("port %d, ready on %s; reached at %s", sv.Port, probe, reach))
	}
	for _, p := range keptOutputs(j) {
		if p.Outputs == blob.EmptyTree().String() {
			line("OUTPUTS", fmt.Sprintf("share %d epoch %d: none, its working directory was left empty", p.Share, p.Epoch))
			continue
		}
		line("OUTPUTS", fmt.Sprintf("share %d epoch %d, kept on %s: gpumesh cp %s:PATH DEST", p.Share, p.Epoch, shortID(p.Node), j.ID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(j.Placements) == 0 {
		msg := "\nno placements yet"
		if j.State.Terminal() {
			msg = "\nno placements" // it ended unplaced, or only its end is kept
		}
		_, err := fmt.Fprintln(w, msg)
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARE\tEPOCH\tNODE\tCARDS\tMODEL\tSTATE\tPRICE (CNY/h)\tCOST (CNY)\tEXIT\tREASON")
	for _, p := range j.Placements {
		why := p.Reason
		if why == "" {
			why = string(p.Cause)
		}
		model := cell(p.Model)
		if p.Simulated {
			model += " (simulated)"
		}
		state := string(p.State)
		if j.Spec.Service != nil && p.State == market.PlacementRunning && !p.Ready {
			// A service's replica runs only once its readiness probe answers.
			state = "starting"
			if why == "" {
				why = "not ready: its readiness probe does not answer yet"
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Share, p.Epoch, shortID(p.Node), len(p.Cards),
			model, cell(state), cny(p.PriceCNY), cny(p.CostCNY), exitCode(p.ExitCode), cell(why))
	}
	return tw.Flush()
}

// stamp shows a time and how long ago it was.
func stamp(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), age(now, t))
}

// writeExplanation prints a placement round for people.
func writeExplanation(w io.Writer, x *market.Explanation) error {
	if x == nil {
		_, err := fmt.Fprintln(w, "no placement round yet: nothing to explain")
		return err
	}
	head := fmt.Sprintf("round %d: needed %s; asked %s", x.Round, cell(x.Need), text.Count(x.Asked, "node"))
	if x.Broadcast {
		head += " and the broadcast topic"
	}
	head += fmt.Sprintf("; %s; %s", text.Count(x.Bids, "bid"), cell(x.Outcome))
	if x.ClearingPriceCU > 0 {
		head += fmt.Sprintf(" at %.4f CNY per compute-unit hour", x.ClearingPriceCU)
	}
	fmt.Fprintln(w, head)
	if len(x.Entries) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STAGE\tNODE\tMODEL\tCARDS\tREASON\tSCORE\tDETAIL")
		for _, en := range x.Entries {
			score := "-"
			if en.Score > 0 {
				score = fmt.Sprintf("%.4f", en.Score)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(en.Stage), shortID(en.Node), cell(en.Model), en.Cards, cell(string(en.Reason)), score, cell(en.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if x.Omitted > 0 {
		fmt.Fprintf(w, "... and %d more candidates not kept\n", x.Omitted)
	}
	if len(x.Cards) > 0 {
		reasons := make([]market.Reason, 0, len(x.Cards))
		for r := range x.Cards {
			reasons = append(reasons, r)
		}
		slices.SortFunc(reasons, func(a, b market.Reason) int {
			if c := cmp.Compare(x.Cards[b], x.Cards[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		parts := make([]string, 0, len(reasons))
		for _, r := range reasons {
			parts = append(parts, fmt.Sprintf("%s %d", r, x.Cards[r]))
		}
		fmt.Fprintf(w, "cards by outcome: %s\n", strings.Join(parts, ", "))
	}
	return nil
}

// newestCheckpoint is the job's newest checkpoint of any share, nil for
// none.
func newestCheckpoint(j market.JobRecord) *market.Checkpoint {
	var best *market.Checkpoint
	for i := range j.Checkpoints {
		if cp := &j.Checkpoints[i]; best == nil || !cp.At.Before(best.At) {
			best = cp
		}
	}
	return best
}

// keptOutputs are, for each share that no attempt runs, the newest ended
// attempt whose node keeps what it left in its working directory.
func keptOutputs(j market.JobRecord) []market.Placement {
	newest := map[int]market.Placement{}
	running := map[int]bool{}
	for _, p := range j.Placements {
		if p.State == market.PlacementRunning {
			running[p.Share] = true
		}
		if b, ok := newest[p.Share]; p.Outputs != "" && (!ok || p.Epoch > b.Epoch) {
			newest[p.Share] = p
		}
	}
	var out []market.Placement
	for share, p := range newest {
		if !running[share] {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b market.Placement) int { return a.Share - b.Share })
	return out
}
