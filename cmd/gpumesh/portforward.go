package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

func newPortForwardCommand(e env) *cobra.Command {
	var (
		af    apiFlags
		share int
	)
	cmd := &cobra.Command{
		Use:   "port-forward JOB [--share N] [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT...",
		Short: "Forward local TCP ports to ports inside a running job",
		Long: `Listen on LOCAL_PORT (on 127.0.0.1 unless LOCAL_ADDR names another
address; 0 picks a free port) and carry every connection made to it to
REMOTE_PORT inside a running share of the job (share 0 unless --share says
otherwise): inside its own network, whatever the job's network mode, none
included. Each connection travels over libp2p from the node you talk to to
the node that runs the share. Many connections may be open at once; when
one side closes its connection, the other side's is closed too.

It prints where it listens and runs until Ctrl-C, or until the share stops
running (exit 1). A connection to a port nothing listens on in the job is
refused with the reason on stderr, and the forwarding goes on.`,
		Example: `  gpumesh port-forward j3fk2x9q0m1z8c7vb 8888:8888        # JupyterLab at http://127.0.0.1:8888
  gpumesh port-forward j3fk2x9q0m1z8c7vb 0.0.0.0:8000:8000 6006:6006
  gpumesh port-forward j3fk2x9q0m1z8c7vb --share 1 0:22`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef("port-forward needs the job's ID and at least one LOCAL_PORT:REMOTE_PORT, as in: gpumesh port-forward JOB 8888:8888")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			job := args[0]
			if err := checkJobShare(job, share); err != nil {
				return err
			}
			var fwds []forwardSpec
			for _, a := range args[1:] {
				f, err := parseForward(a)
				if err != nil {
					return usagef("%q: %v", a, err)
				}
				fwds = append(fwds, f)
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			return portForward(cmd.Context(), e, c, job, share, fwds)
		},
	}
	cmd.Flags().IntVar(&share, "share", 0, "the share whose ports to reach")
	af.registerOwner(cmd)
	return cmd
}

// forwardSpec is one [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT.
type forwardSpec struct {
	local  string // host:port to listen on
	remote int
}

func parseForward(s string) (forwardSpec, error) {
	host := "127.0.0.1"
	rest := s
	if strings.HasPrefix(s, "[") { // [IPv6]:LOCAL:REMOTE
		end := strings.Index(s, "]:")
		if end < 0 {
			return forwardSpec{}, errors.New("want [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT, such as 8888:8888")
		}
		host, rest = s[1:end], "x:"+s[end+2:]
	}
	parts := strings.Split(rest, ":")
	switch len(parts) {
	case 2:
	case 3:
		if !strings.HasPrefix(s, "[") {
			host = parts[0]
		}
		parts = parts[1:]
		if host == "" || (net.ParseIP(host) == nil && host != "localhost") {
			return forwardSpec{}, fmt.Errorf("local address %q: want an IP address such as 127.0.0.1 or 0.0.0.0", host)
		}
	default:
		return forwardSpec{}, errors.New("want [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT, such as 8888:8888")
	}
	local, err := strconv.Atoi(parts[0])
	if err != nil || local < 0 || local > 65535 {
		return forwardSpec{}, fmt.Errorf("local port %q: want 1 to 65535 (0: any free port)", parts[0])
	}
	remote, err := strconv.Atoi(parts[1])
	if err != nil || remote < 1 || remote > 65535 {
		return forwardSpec{}, fmt.Errorf("remote port %q: want 1 to 65535", parts[1])
	}
	return forwardSpec{local: net.JoinHostPort(host, strconv.Itoa(local)), remote: remote}, nil
}

// portForward checks that the share runs, listens, and carries each
// connection until ctx ends or the share stops running.
func portForward(ctx context.Context, e env, c *client.Client, job string, share int, fwds []forwardSpec) error {
	rec, err := c.Job(ctx, job)
	if err != nil {
		return apiError(err, nil)
	}
	if err := shareRuns(rec, share); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, f := range fwds {
		ln, err := net.Listen("tcp", f.local)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", f.local, portuse.Explain("tcp", f.local, err))
		}
		lns = append(lns, ln)
		fmt.Fprintf(e.stdout, "Forwarding from %s -> %d (job %s share %d)\n", ln.Addr(), f.remote, job, share)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   = map[net.Conn]bool{}
		stopErr error
	)
	stop := func(err error) {
		mu.Lock()
		if stopErr == nil {
			stopErr = err
		}
		mu.Unlock()
		cancel()
	}
	for i, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lc, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns[lc] = true
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { mu.Lock(); delete(conns, lc); mu.Unlock() }()
					t, err := c.Forward(ctx, job, share, fwds[i].remote)
					if err != nil {
						lc.Close()
						if ctx.Err() != nil {
							return
						}
						var ae *client.APIError
						if errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound || ae.Status == http.StatusForbidden) {
							stop(fmt.Errorf("job %s share %d: %s", job, share, ae.Message))
							return
						}
						fmt.Fprintf(e.stderr, "gpumesh: a connection to %s -> %d: %v\n", ln.Addr(), fwds[i].remote, apiError(err, nil))
						return
					}
					wire.Splice(asHalfCloser(lc), t)
				}()
			}
		}()
	}
	<-ctx.Done()
	for _, ln := range lns {
		ln.Close()
	}
	mu.Lock()
	for lc := range conns {
		lc.Close() // the tunnel closes with it
	}
	mu.Unlock()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return stopErr // nil for Ctrl-C: how one stops forwarding
}

// shareRuns says why a share cannot be reached now, nil when it runs.
func shareRuns(rec market.JobRecord, share int) error {
	if rec.State.Terminal() {
		return fmt.Errorf("job %s has ended (%s): nothing of it runs", rec.ID, rec.State)
	}
	var found, running bool
	for _, p := range rec.Placements {
		if p.Share == share {
			found = true
			running = running || (p.State == market.PlacementRunning && !p.StartedAt.IsZero())
		}
	}
	switch {
	case !found && len(rec.Placements) == 0:
		return fmt.Errorf("job %s is not running: it has not been placed yet (%s)", rec.ID, rec.State)
	case !found:
		return usagef("--share: job %s has no share %d", rec.ID, share)
	case !running:
		return fmt.Errorf("job %s share %d is not running (the job is %s)", rec.ID, share, rec.State)
	}
	return nil
}

// asHalfCloser gives an accepted connection the half-close a tunnel
// carries (TCP connections have it).
func asHalfCloser(c net.Conn) wire.HalfCloser {
	if hc, ok := c.(wire.HalfCloser); ok {
		return hc
	}
	return closeWhole{c}
}

type closeWhole struct{ net.Conn }

func (c closeWhole) CloseWrite() error { return c.Conn.Close() }
