package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// statusTimeout bounds the whole GET /v1/status exchange.
const statusTimeout = 10 * time.Second

func newStatusCommand(e env) *cobra.Command {
	var (
		af     apiFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the mesh's health as a node sees it",
		Long: `Show one screen about the mesh, as the node behind --api sees it: the node
itself (peer ID, version, uptime, NAT reachability, its cards and their health),
what its cards earned (today, this week from Monday, in all, by model: the
card-seconds of the jobs they ran at the price each was awarded at, as the
jobs are billed),
the mesh (members by state, cards total/free/busy by model and by vendor,
regions), the jobs the node coordinates (by state, reroutes in the last hour,
placement latency over the last 5 minutes), gossip (mesh peers, messages/s,
bytes/s, rejected messages by reason) and warnings.

A node whose API listens beyond loopback needs its token: --api-token-file,
or $` + envAPIToken + `.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(cmd.Context(), statusTimeout)
			defer cancel()
			body, err := c.Status(ctx)
			if err != nil {
				return apiError(err, nil)
			}
			if asJSON {
				var out bytes.Buffer
				if err := json.Indent(&out, body, "", "  "); err != nil {
					return fmt.Errorf("status from %s is not JSON: %w", c.Addr(), err)
				}
				out.WriteByte('\n')
				_, err := e.stdout.Write(out.Bytes())
				return err
			}
			var st api.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("status from %s: %w", c.Addr(), err)
			}
			return writeStatus(e.stdout, &st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node's status as JSON (the body of GET /v1/status)")
	af.register(cmd)
	return cmd
}

// writeStatus renders the one screen of `gpumesh status`.
func writeStatus(w io.Writer, st *api.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := st.Node
	reach := n.Reachability
	switch reach {
	case "":
		reach = api.ReachabilityUnknown
	case api.ReachabilityPrivate:
		reach += " (behind NAT: reached through relays)"
	}
	fmt.Fprintf(tw, "NODE\t%s\n", orDash(n.PeerID))
	facts := []string{"version " + orDash(n.Version), "up " + fmtSeconds(n.UptimeSeconds), "reachability " + reach}
	if n.Region != "" {
		facts = append(facts, "region "+oneLine(n.Region))
	}
	if n.Coordinator {
		facts = append(facts, "coordinator")
	}
	fmt.Fprintf(tw, "\t%s\n", strings.Join(facts, " · "))
	if len(n.Cards) == 0 {
		fmt.Fprintf(tw, "\tno cards\n")
	}
	for i, c := range n.Cards {
		head := ""
		if i == 0 {
			head = "CARDS"
		}
		doing := c.State
		if c.Job != "" {
			doing += " " + c.Job
		}
		health := "ok"
		if !c.Healthy {
			health = "UNHEALTHY"
			if c.Health.Reason != "" {
				health += ": " + oneLine(c.Health.Reason)
			}
		}
		model := oneLine(c.Model)
		if c.Simulated {
			model += " (simulated)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", head, model, oneLine(c.ID), oneLine(doing), health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Earnings != nil {
		writeEarnings(w, st.Earnings, len(n.Cards) > 0)
	}
	if st.Images != nil {
		writeImages(w, st.Images)
	}

	m := st.Mesh
	fmt.Fprintf(w, "\nMESH   %s: %d alive, %d suspect, %d dead, %d left\n",
		text.Count(m.Members.Total(), "member"), m.Members.Alive, m.Members.Suspect, m.Members.Dead, m.Members.Left)
	if len(m.Regions) > 0 {
		rs := make([]string, 0, len(m.Regions))
		for _, r := range m.Regions {
			rs = append(rs, fmt.Sprintf("%s %s, %s", orValue(r.Region, "(none)"), text.Count(r.Members, "member"), text.Count(r.Cards, "card")))
		}
		fmt.Fprintf(w, "       regions: %s\n", strings.Join(rs, " · "))
	}
	fmt.Fprintf(w, "       cards: %d total, %d free, %d reserved, %d busy\n", m.Cards.Total, m.Cards.Free, m.Cards.Reserved, m.Cards.Busy)
	if len(m.ByModel) > 0 {
		writeCapacity(w, m)
	}

	j := st.Jobs
	fmt.Fprintf(w, "\nJOBS   %s\n", jobCounts(j.ByState))
	p := j.Placement
	fmt.Fprintf(w, "       placement (last %s): ", fmtSeconds(p.WindowSeconds))
	if p.Count == 0 {
		fmt.Fprintf(w, "no jobs placed\n")
	} else {
		fmt.Fprintf(w, "%s, p50 %s, p99 %s\n", text.Count(p.Count, "job"), fmtLatency(p.P50Seconds), fmtLatency(p.P99Seconds))
	}
	r := j.Reroutes
	fmt.Fprintf(w, "       reroutes (last %s): ", fmtSeconds(r.WindowSeconds))
	if r.Count == 0 {
		fmt.Fprintf(w, "none\n")
	} else {
		fmt.Fprintf(w, "%d, median %s to run again\n", r.Count, fmtLatency(r.MedianSeconds))
	}

	g := st.Gossip
	fmt.Fprintf(w, "\nGOSSIP %s · %.1f msg/s · in %s · out %s\n",
		text.Count(g.MeshPeers, "mesh peer"), g.MessagesPerSecond, fmtRate(g.BytesInPerSecond), fmtRate(g.BytesOutPerSecond))
	fmt.Fprintf(w, "       rejected: %s\n", reasonCounts(g.Rejected))
	if len(g.Ignored) > 0 {
		fmt.Fprintf(w, "       ignored: %s\n", reasonCounts(g.Ignored))
	}

	if len(st.Warnings) == 0 {
		_, err := fmt.Fprintf(w, "\nWARNINGS none\n")
		return err
	}
	fmt.Fprintf(w, "\nWARNINGS\n")
	for _, s := range st.Warnings {
		fmt.Fprintf(w, "  ! %s\n", oneLine(s))
	}
	return nil
}

// writeImages prints whether the node runs images, where the layers it
// pulled came from, and how each vendor's cards enter them:
//
//	IMAGES runs them with /usr/sbin/runc · 2 pulls, 1 unpacked (1.2 GiB kept)
//	       layers: 1.5 GiB from peers (6), 820 MiB from registries (3), 2 cached
//	       nvidia cards enter through CDI: nvidia.com/gpu=0, nvidia.com/gpu=1 from /etc/cdi/nvidia.yaml
//	       amd cards enter by built-in rules: no CDI spec in /etc/cdi or /var/run/cdi names amd.com devices
func writeImages(w io.Writer, im *api.ImagesStatus) {
	runs := "runs them with " + im.Runtime
	if im.Runtime == "" {
		runs = "runs none: " + oneLine(im.NoImages)
	}
	fmt.Fprintf(w, "\nIMAGES %s · %s, %d unpacked (%s kept)\n", runs, text.Count(int(im.Pulls), "pull"), im.Unpacks, text.Bytes(im.RootfsBytes))
	fmt.Fprintf(w, "       layers: %s from peers (%d), %s from registries (%d), %d cached\n",
		text.Bytes(im.PeerBytes), im.PeerLayers, text.Bytes(im.RegistryBytes), im.RegistryLayers, im.CachedLayers)
	for _, c := range im.Cards {
		how := "through CDI: "
		if c.Via != "cdi" {
			how = "by built-in rules: "
		}
		fmt.Fprintf(w, "       %s cards enter %s%s\n", oneLine(c.Vendor), how, oneLine(c.Detail))
	}
}

// writeEarnings prints what this node's cards earned: today, this week and
// in all, then by model.
func writeEarnings(w io.Writer, e *api.Earnings, hasCards bool) {
	if e.Total.CardSeconds <= 0 {
		why := ""
		if !hasCards {
			why = ": this node offers no cards"
		}
		fmt.Fprintf(w, "\nEARNED nothing yet%s\n", why)
		return
	}
	amount := func(x api.Earned) string {
		return fmt.Sprintf("%s CNY (%.1f card-hours)", cny(x.CNY), x.CardSeconds/3600)
	}
	fmt.Fprintf(w, "\nEARNED today %s · this week %s · in all %s since %s\n",
		amount(e.Today), amount(e.Week), amount(e.Total), e.Since.Local().Format(time.DateOnly))
	mw := len("MODEL")
	for _, r := range e.ByModel {
		mw = max(mw, len(oneLine(r.Model)))
	}
	fmt.Fprintf(w, "       %-*s  %10s  %10s  %10s\n", mw, "MODEL", "TODAY", "THIS WEEK", "IN ALL")
	for _, r := range e.ByModel {
		fmt.Fprintf(w, "       %-*s  %10s  %10s  %10s\n", mw, oneLine(r.Model), cny(r.Today.CNY), cny(r.Week.CNY), cny(r.Total.CNY))
	}
}

// writeCapacity prints the cards by model, then by vendor: names left,
// counts right.
func writeCapacity(w io.Writer, m api.MeshStatus) {
	mw, vw := len("MODEL"), len("VENDOR")
	for _, r := range m.ByModel {
		mw, vw = max(mw, len(oneLine(r.Model))), max(vw, len(oneLine(r.Vendor)))
	}
	for _, r := range m.ByVendor {
		mw = max(mw, len("(all "+oneLine(r.Vendor)+")"))
	}
	row := func(model, vendor string, total, free, reserved, busy any) {
		fmt.Fprintf(w, "       %-*s  %-*s  %5v  %5v  %8v  %5v\n", mw, model, vw, vendor, total, free, reserved, busy)
	}
	row("MODEL", "VENDOR", "TOTAL", "FREE", "RESERVED", "BUSY")
	for _, r := range m.ByModel {
		row(oneLine(r.Model), oneLine(r.Vendor), r.Total, r.Free, r.Reserved, r.Busy)
	}
	for _, r := range m.ByVendor {
		row("(all "+oneLine(r.Vendor)+")", "", r.Total, r.Free, r.Reserved, r.Busy)
	}
}

// jobStateOrder is the lifecycle order the job counts are shown in.
var jobStateOrder = []market.JobState{
	market.JobPending, market.JobBidding, market.JobPlacing, market.JobRunning, market.JobRerouting,
	market.JobSucceeded, market.JobFailed, market.JobCancelled, market.JobMoved,
}

func jobCounts(by map[string]int) string {
	var parts []string
	seen := map[string]bool{}
	for _, s := range jobStateOrder {
		seen[string(s)] = true
		if n := by[string(s)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	var rest []string
	for s, n := range by {
		if !seen[s] && n > 0 {
			rest = append(rest, fmt.Sprintf("%s %d", oneLine(s), n))
		}
	}
	slices.Sort(rest)
	parts = append(parts, rest...)
	if len(parts) == 0 {
		return "none coordinated here"
	}
	return "coordinated here: " + strings.Join(parts, " · ")
}

func reasonCounts(by map[string]uint64) string {
	if len(by) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	// Largest first, then by name.
	slices.SortFunc(keys, func(a, b string) int {
		if by[a] != by[b] {
			if by[a] > by[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", oneLine(k), by[k])
	}
	return strings.Join(parts, ", ")
}

// fmtSeconds renders a long span compactly: 45s, 5m, 1h, 3h12m, 2d4h.
func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		if d%time.Minute == 0 {
			return fmt.Sprintf("%dm", int(d.Minutes()))
		}
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		if d%time.Hour < time.Minute {
			return fmt.Sprintf("%dh", int(d.Hours()))
		}
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtLatency renders a latency: 12ms, 850ms, 1.20s, 95s.
func fmtLatency(s float64) string {
	switch {
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	case s < 60:
		return fmt.Sprintf("%.2fs", s)
	}
	return fmtSeconds(s)
}

// fmtRate renders bytes per second in decimal units.
func fmtRate(b float64) string {
	switch {
	case b < 1000:
		return fmt.Sprintf("%.0f B/s", b)
	case b < 1e6:
		return fmt.Sprintf("%.1f kB/s", b/1e3)
	case b < 1e9:
		return fmt.Sprintf("%.1f MB/s", b/1e6)
	}
	return fmt.Sprintf("%.1f GB/s", b/1e9)
}

func orDash(s string) string { return orValue(s, "-") }

func orValue(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return oneLine(s)
}
