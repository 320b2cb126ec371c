package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newDrainCommand is `gpumesh node drain`.
func newDrainCommand(e env) *cobra.Command {
	var (
		af      apiFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Move the work off a node before taking it down",
		Long: `Ask a node to leave on purpose: it stops offering its cards, and the
coordinators of the shares it runs move them elsewhere. A service's replica
gets its replacement running first and is stopped after, so the service never
runs short; other shares get SIGTERM (time to write a checkpoint) and run
again elsewhere from it. The command returns when nothing runs on the node
any more, or after --timeout, when the node stops what is left.

The node stays in the mesh until it is stopped (SIGTERM). To drain on
shutdown instead, start the node with --drain-timeout.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("--timeout %v: want a positive duration", timeout)
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			res, err := c.Drain(cmd.Context(), timeout)
			if err != nil {
				return apiError(err, nil)
			}
			if !res.Drained {
				return fmt.Errorf("drain did not finish within %v: %s", timeout, res.Error)
			}
			fmt.Fprintln(e.stdout, "drained: no share runs on the node any more")
			return nil
		},
	}
	af.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the shares to move")
	return cmd
}
