package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/cardedit"
	"github.com/gpumesh/gpumesh/node/datadir"
	"github.com/gpumesh/gpumesh/node/doctor"
)

// doctorShown are the flags of gpumesh node that doctor shows in its help:
// the ones its checks use. It takes every other flag of gpumesh node too
// (hidden), so that it reads the same configuration file.
var doctorShown = map[string]bool{"data": true, "listen": true, "join": true, "secret-file": true}

// newDoctorCommand is `gpumesh doctor`.
func newDoctorCommand(e env) *cobra.Command {
	var (
		f      nodeFlags
		asJSON bool
		probe  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor [--join PEER_ADDRESS]... [flags]",
		Short: "Check this machine before offering it to the mesh",
		Long: `Check what a node needs of this machine and print each check as OK, WARN,
FAIL or SKIP (not made) with what was found and what to do:

  privileges         root runs jobs in the sandbox; otherwise they run as plain processes
  cgroup v2          the cpu, memory and pids controllers that limit jobs
  nftables, iproute2 the tools that give jobs their network rules
  OCI runtime        crun or runc, for jobs that run a container image
  GPU driver         the NVIDIA driver and NVML, or a vendor's tool
  cards              the cards the node would offer
  CDI specs          /etc/cdi, /var/run/cdi
  data dir, free disk  the node's --data and the space left there
  listen port        --listen's ports are free (or held by a running node)
  mesh reachability  with --join: a peer dials this machine's listen port back
  NAT type           with --join: whether hole punching can work from here

With --join, doctor connects to those peers as a client with a throwaway
identity (it never joins the mesh and keeps nothing): each tells the address
it sees this machine at, and one dials the listen port back (AutoNAT v2).
Two or more peers tell the NAT's kind. Without --join the mesh is not asked.

doctor reads the node's configuration file as gpumesh node does (--config),
so it checks the data dir and ports the node would use. It changes nothing
on the machine. Exit status 0 when nothing failed, 1 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := f.readConfigFile(cmd.Flags(), e); err != nil {
				return err
			}
			cfg, err := f.doctorConfig(e, probe)
			if err != nil {
				return err
			}
			results := doctor.Run(cmd.Context(), cfg)
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			} else {
				writeDoctor(e.stdout, results)
			}
			if results.Failed() {
				return exitCodeError{exitError}
			}
			return nil
		},
	}
	f.register(cmd.Flags(), e)
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if !doctorShown[fl.Name] {
			fl.Hidden = true
		}
	})
	cmd.Flags().StringVar(&f.configFile, flagConfig, "", "the node's configuration `FILE` (default "+systemConfigFile+" when it exists, else $XDG_CONFIG_HOME/gpumesh/node.toml)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"ok": bool, "checks": [{"check", "status", "found", "fix"}]} instead of a table`)
	cmd.Flags().DurationVar(&probe, "probe-timeout", 20*time.Second, "how long to wait for the --join peers")
	return cmd
}

// doctorConfig turns the node's flags into what doctor checks.
func (f nodeFlags) doctorConfig(e env, probe time.Duration) (doctor.Config, error) {
	cfg := doctor.Config{CheckDataDir: datadir.Check, CardPaths: func(cards []device.Card) []cardedit.Path {
		ed, err := cardedit.New(cardedit.Config{})
		if err != nil {
			return nil
		}
		return ed.Paths(cards)
	}}
	dir, err := resolvePath(f.data, e)
	if err != nil {
		return cfg, usagef("--data %s: %v", f.data, err)
	}
	cfg.DataDir = dir
	for _, s := range f.listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return cfg, usagef("--listen %q: %v", s, err)
		}
		cfg.ListenAddrs = append(cfg.ListenAddrs, a)
	}
	var secret []byte
	if f.secretFile != "" {
		b, err := os.ReadFile(f.secretFile)
		if err != nil {
			return cfg, usagef("--secret-file: %v", err)
		}
		secret = []byte(strings.TrimSpace(string(b)))
	}
	if len(cfg.ListenAddrs) == 0 {
		for _, s := range []string{"/ip4/0.0.0.0/tcp/%d", "/ip4/0.0.0.0/udp/%d/quic-v1"} {
			if strings.Contains(s, "quic") && len(secret) > 0 {
				continue // a private mesh has no QUIC
			}
			cfg.ListenAddrs = append(cfg.ListenAddrs, ma.StringCast(fmt.Sprintf(s, mesh.DefaultPort)))
		}
	}
	var join []ma.Multiaddr
	for _, s := range f.join {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return cfg, usagef("--join %q: %v", s, err)
		}
		if _, err := a.ValueForProtocol(ma.P_P2P); err != nil {
			return cfg, usagef("--join %q: want a full multiaddr ending in /p2p/<peer ID>", s)
		}
		join = append(join, a)
	}
	if len(join) > 0 {
		cfg.Probe = func(ctx context.Context, listen []ma.Multiaddr) (mesh.ProbeResult, error) {
			return mesh.Probe(ctx, mesh.ProbeConfig{Join: join, ListenAddrs: listen, Secret: secret, Timeout: probe})
		}
	}
	return cfg, nil
}

// writeDoctor prints the results as a table and a summary line.
func writeDoctor(w io.Writer, results doctor.Results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Status, r.Check, r.Found)
		if r.Fix != "" {
			fmt.Fprintf(tw, "\t\t→ %s\n", r.Fix)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, results.Summary())
}
