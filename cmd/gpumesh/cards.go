package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
)

// cardView is one card as `gpumesh cards --json` prints it: the card record
// plus a top-level "healthy" for scripts that need no more.
type cardView struct {
	device.Card
	Healthy bool `json:"healthy"`
}

func newCardsCommand(e env) *cobra.Command {
	var (
		sim     string
		seed    string
		asJSON  bool
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "cards",
		Short: "List the cards this machine has",
		Long: `List the accelerators of this machine: model, memory, compute units (dense
BF16 TFLOPS / 312, an A100 is 1.00), health, vendor and id.

Without --sim, gpumesh asks every backend: NVIDIA through NVML, AMD (amd-smi
or rocm-smi), Hygon (hy-smi or rocm-smi), Moore Threads (mthreads-gmi),
Huawei Ascend (npu-smi) and Kunlunxin (xpu-smi). A machine without cards
prints an empty list; --verbose says on stderr what each backend found.
A backend that fails is reported on stderr either way.

With --sim, it lists simulated cards instead, from catalog figures:
  gpumesh cards --sim h100-sxm-80g:8,rtx4090-48g:2,mtt-s4000-48g:4
Entries are catalog-key:count (count 1..1024; a key alone means 1).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat := device.DefaultCatalog()
			var backends []device.Backend
			if cmd.Flags().Changed("sim") {
				spec, err := device.ParseSimSpec(sim, cat)
				if err != nil {
					return usagef("--sim: %v", err)
				}
				s, err := device.NewSim(spec, seed, cat)
				if err != nil {
					return usagef("--sim: %v", err)
				}
				backends = []device.Backend{s}
			} else {
				backends = device.DefaultBackends(device.ExecRunner{}, cat)
			}
			cards, statuses, err := device.Discover(cmd.Context(), device.Config{Backends: backends})
			if err != nil {
				return err
			}
			for _, st := range statuses {
				switch {
				case st.State == device.StateFailed:
					fmt.Fprintf(e.stderr, "gpumesh: warning: %s backend failed: %s\n", st.Backend, st.Reason)
				case verbose && st.State == device.StateAbsent:
					fmt.Fprintf(e.stderr, "%s: absent: %s\n", st.Backend, st.Reason)
				case verbose:
					fmt.Fprintf(e.stderr, "%s: %s\n", st.Backend, text.Count(st.Cards, "card"))
				}
			}
			if asJSON {
				return writeCardsJSON(e.stdout, cards)
			}
			return writeCardsTable(e.stdout, cards)
		},
	}
	cmd.Flags().StringVar(&sim, "sim", "", "list simulated cards from a spec such as h100-sxm-80g:8,rtx4090-48g:2")
	cmd.Flags().StringVar(&seed, "sim-seed", "local", "seed of the simulated cards' IDs: the same spec and seed give the same IDs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of cards instead of a table")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "say on stderr what each backend found, or why it found nothing")
	return cmd
}

func writeCardsJSON(w io.Writer, cards []device.Card) error {
	views := make([]cardView, 0, len(cards))
	for _, c := range cards {
		views = append(views, cardView{Card: c, Healthy: c.Health.Healthy})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(views)
}

func writeCardsTable(w io.Writer, cards []device.Card) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tMEMORY\tCU\tHEALTH\tVENDOR\tID")
	for _, c := range cards {
		cu := "?"
		if c.ComputeUnits > 0 {
			cu = fmt.Sprintf("%.2f", c.ComputeUnits)
		}
		health := "ok"
		if !c.Health.Healthy {
			health = "unhealthy: " + strings.ReplaceAll(c.Health.Reason, "\t", " ")
		}
		fmt.Fprintf(tw, "%s\t%d GiB\t%s\t%s\t%s\t%s\n", c.Model, c.MemoryGiB(), cu, health, c.Vendor, c.ID)
	}
	return tw.Flush()
}
