package main

import (
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/internal/text"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node/api"
)

func newOffersCommand(e env) *cobra.Command {
	var (
		af       apiFlags
		asJSON   bool
		model    string
		minMem   string
		region   string
		maxPrice float64
		sortBy   string
	)
	cmd := &cobra.Command{
		Use:   "offers",
		Short: "List what the mesh sells: cards, prices, reliability",
		Long: `List what the mesh sells, as the node behind --api hears it from the
suppliers' capacity ads: one line per supplier and card model that has a
free card, with the free and total cards, memory, compute units (CU: dense
BF16 TFLOPS / 312, an A100 is 1.00), the price per card-hour and per
compute-unit hour in CNY, the supplier's reliability and region.

RELIABILITY is what the supplier advertises (its MTBF, "?" when it names
none, and how long it has been up) and, when the node coordinated jobs
there, what the node saw itself ("here: 1 of 4 lost, MTBF 5h"): the auction
weighs a supplier by the lower of the two MTBFs.

--model takes a catalog key (h100-sxm-80g), a pattern (h100-*) or part of a
key (4090). Offers whose cards are all busy are left out and counted on
stderr. --json prints the node's answer (GET /v1/offers).`,
		Example: `  gpumesh offers
  gpumesh offers --model 4090 --min-mem 48GiB --sort cu-price
  gpumesh offers --region cn-east --max-price 10 --sort reliability`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := api.OfferQuery{Model: strings.TrimSpace(model), Region: strings.TrimSpace(region), Sort: sortBy}
			if minMem != "" {
				mib, err := parseMiB(minMem)
				if err != nil {
					return usagef("--min-mem: %v", err)
				}
				q.MinMemoryMiB = mib
			}
			if cmd.Flags().Changed("max-price") && !(maxPrice > 0 && !math.IsInf(maxPrice, 0)) {
				return usagef("--max-price: want a price in CNY per card-hour above 0, got %v", maxPrice)
			}
			q.MaxPriceCNY = maxPrice
			// The node checks the rest; checking here too names the flag
			// before anything is asked.
			if _, err := api.ParseOfferQuery(q.Values()); err != nil {
				var he *api.HTTPError
				if errors.As(err, &he) && offerFlags[he.Field] != "" {
					return usagef("%s: %v", offerFlags[he.Field], he.Err)
				}
				return usageError{err}
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			list, err := c.Offers(cmd.Context(), q)
			if err != nil {
				return apiError(err, offerFlags)
			}
			if asJSON {
				return writeJSON(e.stdout, list)
			}
			if err := writeOffersTable(e.stdout, list.Offers); err != nil {
				return err
			}
			switch {
			case list.BusyOffers > 0:
				verb := "offers have"
				if list.BusyOffers == 1 {
					verb = "offer has"
				}
				fmt.Fprintf(e.stderr, "gpumesh: %d more matching %s no free card (%s busy)\n", list.BusyOffers, verb, text.Count(list.BusyCards, "card"))
			case len(list.Offers) == 0:
				fmt.Fprintln(e.stderr, "gpumesh: no offer matches")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "a catalog key, a pattern (h100-*) or part of a key (4090)")
	cmd.Flags().StringVar(&minMem, "min-mem", "", "the least memory per card, such as 48GiB")
	cmd.Flags().StringVar(&region, "region", "", "only suppliers of this region")
	cmd.Flags().Float64Var(&maxPrice, "max-price", 0, "the highest price in CNY per card-hour")
	cmd.Flags().StringVar(&sortBy, "sort", api.SortPrice, "order: price (per card-hour), cu-price (per compute-unit hour) or reliability (longest MTBF first)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node's answer as JSON")
	af.register(cmd)
	return cmd
}

// offerFlags names the flag behind each query parameter.
var offerFlags = map[string]string{"model": "--model", "min_mem_mib": "--min-mem", "region": "--region", "max_price": "--max-price", "sort": "--sort"}

func writeOffersTable(w io.Writer, offers []api.Offer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tFREE\tMEMORY\tCU\tCNY/CARD-H\tCNY/CU-H\tRELIABILITY\tREGION\tNODE")
	for _, o := range offers {
		cu, perCU := "?", "-"
		if o.ComputeUnits > 0 {
			cu = fmt.Sprintf("%.2f", o.ComputeUnits)
			perCU = cny(o.PricePerCUCNY)
		}
		node := shortID(o.Node)
		if o.Self {
			node += " (self)"
		}
		model := cell(o.Model)
		if o.Simulated {
			model += " (simulated)"
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%d GiB\t%s\t%s\t%s\t%s\t%s\t%s\n", model, o.Free, o.Total, o.MemoryMiB>>10, cu,
			cny(o.PriceCNY), perCU, reliability(o.Reliability), cell(o.Region), node)
	}
	return tw.Flush()
}

// reliability is an offer's reliability in one cell: "MTBF 30d0h, up 3h12m;
// here 1 of 4 lost, MTBF 5h".
func reliability(r api.Reliability) string {
	mtbf := "?"
	if r.MTBFSeconds > 0 {
		mtbf = fmtSeconds(r.MTBFSeconds)
	}
	s := fmt.Sprintf("MTBF %s, up %s", mtbf, fmtSeconds(r.UptimeSeconds))
	if seen := r.Seen; seen != nil {
		s += fmt.Sprintf("; here %d of %d lost", seen.Lost, seen.Lost+seen.Ended)
		if seen.MTBFSeconds > 0 {
			s += ", MTBF " + fmtSeconds(seen.MTBFSeconds)
		}
	}
	return s
}
