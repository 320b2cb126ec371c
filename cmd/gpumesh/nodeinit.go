package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
)

// serviceDataDir is the data dir that `gpumesh node init` writes into the
// system configuration (a node run as a service by root).
const serviceDataDir = "/var/lib/gpumesh"

// newNodeInitCommand is `gpumesh node init`.
func newNodeInitCommand(e env) *cobra.Command {
	var (
		f     nodeFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:   "init [--config FILE] [flags]",
		Short: "Write a node configuration file from this machine's cards and the flags given",
		Long: `Write a configuration file for gpumesh node, asking nothing: the cards this
machine has (or --sim) are listed at its top with the price each model asks by
default, every flag given here becomes a key, and every other key is written
commented out with its default and what it means.

The file is --config FILE, else ` + systemConfigFile + ` for root (with the data
dir ` + serviceDataDir + ` unless --data is given), else
$XDG_CONFIG_HOME/gpumesh/node.toml (~/.config/gpumesh/node.toml). An existing
file is kept unless --force is given. The flags are checked as gpumesh node
checks them: a bad one exits with status 2 and writes nothing.

Examples:
  sudo gpumesh node init --join /ip4/203.0.113.7/tcp/4747/p2p/12D3KooW... --region cn-east
  gpumesh node init --config ./node.toml --sim h100-sxm-80g:8 --api 127.0.0.1:7071`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			path := f.configFile
			if path == "" {
				path = defaultConfigFile(e)
			}
			if path == "" {
				return usagef("no home directory to keep the configuration in: give --config FILE")
			}
			path, err := filepath.Abs(path)
			if err != nil {
				return usagef("--config %s: %v", f.configFile, err)
			}
			if _, err := os.Stat(path); err == nil && !force {
				return usagef("%s exists: --force to replace it", path)
			}
			if path == e.systemConfig && !fl.Changed("data") {
				if err := fl.Set("data", serviceDataDir); err != nil {
					return err
				}
			}
			cfg, err := f.config(e) // checks every flag as gpumesh node does
			if err != nil {
				return err
			}
			backends := cfg.Devices
			if backends == nil {
				backends = device.DefaultBackends(device.ExecRunner{}, device.DefaultCatalog())
			}
			cards, _, err := device.Discover(cmd.Context(), device.Config{Backends: backends})
			if err != nil {
				return fmt.Errorf("finding this machine's cards: %w", err)
			}
			body := initConfig(fl, cards, cmd.CommandPath())
			if err := writeFileAtomic(path, []byte(body), 0o644); err != nil {
				return err
			}
			run := "gpumesh node"
			if path != e.systemConfig && path != userConfigFile(e) {
				run += " --config " + path
			}
			fmt.Fprintf(e.stdout, "wrote %s (%s); start the node with: %s\n", path, cardSummary(cards), run)
			return nil
		},
	}
	f.register(cmd.Flags(), e)
	cmd.Flags().StringVar(&f.configFile, flagConfig, "", "the `FILE` to write (default "+systemConfigFile+" for root, else $XDG_CONFIG_HOME/gpumesh/node.toml)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
	return cmd
}

// cardSummary says which cards were found: "no cards found" or
// "8 cards: 8 × h100-sxm-80g".
func cardSummary(cards []device.Card) string {
	if len(cards) == 0 {
		return "no cards found"
	}
	var parts []string
	for _, m := range modelCounts(cards) {
		parts = append(parts, fmt.Sprintf("%d × %s", m.n, m.model))
	}
	return text.Count(len(cards), "card") + ": " + strings.Join(parts, ", ")
}

type modelCount struct {
	model string
	n     int
}

// modelCounts counts cards by model, in model order.
func modelCounts(cards []device.Card) []modelCount {
	n := map[string]int{}
	for _, c := range cards {
		n[c.Model]++
	}
	out := make([]modelCount, 0, len(n))
	for m, k := range n {
		out = append(out, modelCount{m, k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].model < out[j].model })
	return out
}

// initConfig is the file `gpumesh node init` writes: the cards found, then
// every key, set where its flag was given and commented out with its
// default otherwise.
func initConfig(fl *pflag.FlagSet, cards []device.Card, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# gpumesh node configuration, written by `%s`.\n", command)
	b.WriteString("# One key per flag of `gpumesh node` (see gpumesh node --help); a flag given\n")
	b.WriteString("# on the command line overrides the key. `gpumesh node --print-config` shows\n")
	b.WriteString("# what is in effect.\n#\n")
	if len(cards) == 0 {
		b.WriteString("# Cards found on this machine: none (see `gpumesh cards -v`).\n")
	} else {
		b.WriteString("# Cards found on this machine:\n")
		cat := device.DefaultCatalog()
		for _, m := range modelCounts(cards) {
			price := "no list price: set one with price"
			if model, ok := cat.Lookup(m.model); ok {
				price = fmt.Sprintf("asks %.2f CNY per card-hour by default", model.DefaultPriceCNY())
			}
			fmt.Fprintf(&b, "#   %d × %s (%s)\n", m.n, m.model, price)
		}
	}
	for _, key := range configKeys(fl) {
		f := fl.Lookup(key)
		b.WriteString("\n")
		for _, line := range wrap(strings.ReplaceAll(f.Usage, "`", ""), 76) {
			fmt.Fprintf(&b, "# %s\n", line)
		}
		if f.Changed {
			fmt.Fprintf(&b, "%s = %s\n", key, tomlValue(f))
			continue
		}
		if key == "price" && len(cards) > 0 {
			fmt.Fprintf(&b, "# price = %s\n", examplePrices(cards))
			continue
		}
		fmt.Fprintf(&b, "# %s = %s\n", key, tomlValue(f))
	}
	return b.String()
}

// examplePrices is a price list for the models of cards at their default
// prices, for the commented price key.
func examplePrices(cards []device.Card) string {
	cat := device.DefaultCatalog()
	var list []string
	for _, m := range modelCounts(cards) {
		if model, ok := cat.Lookup(m.model); ok {
			list = append(list, tomlString(fmt.Sprintf("%s=%.2f", m.model, model.DefaultPriceCNY())))
		}
	}
	return "[" + strings.Join(list, ", ") + "]"
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory, so that a reader never sees half a file; it makes the
// directory (0755) if needed.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".node.toml-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), mode)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
