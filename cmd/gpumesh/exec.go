package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// Exit statuses of gpumesh exec besides the command's own.
const (
	exitCannotRun = 127 // the command does not exist in the job
	exitBroken    = 255 // the tunnel broke before the command exited
)

func newExecCommand(e env) *cobra.Command {
	var (
		af          apiFlags
		share       int
		interactive bool
		tty         bool
	)
	cmd := &cobra.Command{
		Use:   "exec JOB [--share N] [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command inside a running job",
		Long: `Run a command inside a running share of a job (share 0 unless --share
says otherwise), as the job runs: in its sandbox (its namespaces, cgroup and
user) or process group, in its working directory, with its environment and
cards. Any node reaches it: the node you talk to opens a libp2p stream to the
node that runs the share, however far and behind whatever NAT.

-i sends your standard input to the command; -t gives it a terminal (with
your terminal's size, following it as it changes, and Ctrl-C delivered to
the command as on a local terminal). Without -t, Ctrl-C is sent to the
command as SIGINT.

gpumesh exec exits with the command's exit status (128+N when signal N
ended it); 127 when the job has no such command; 255 when the connection
broke before the command exited; 1 when the node refused (another owner's
job, a job that is not running) and 2 for bad flags. The supplier logs who
ran what.`,
		Example: `  gpumesh exec j3fk2x9q0m1z8c7vb -- nvidia-smi
  gpumesh exec -it j3fk2x9q0m1z8c7vb -- bash
  gpumesh exec j3fk2x9q0m1z8c7vb --share 1 -- sh -c 'ls $GPUMESH_CHECKPOINT_DIR'`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("exec needs the job's ID and the command, as in: gpumesh exec JOB -- bash")
			case len(args) == 1:
				return usagef("no command: give it after --, as in: gpumesh exec %s -- bash", args[0])
			case cmd.ArgsLenAtDash() > 1:
				return usagef("exec takes one job ID before --, got %q", args[:cmd.ArgsLenAtDash()])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			job, command := args[0], args[1:]
			if err := checkJobShare(job, share); err != nil {
				return err
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			return runExec(cmd.Context(), e, c, job, share, command, interactive, tty)
		},
	}
	cmd.Flags().IntVar(&share, "share", 0, "the share to run the command in")
	cmd.Flags().BoolVarP(&interactive, "stdin", "i", false, "send standard input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	af.registerOwner(cmd)
	return cmd
}

// execFlags names the flag behind each exec request field.
var execFlags = map[string]string{"share": "--share", "command": "COMMAND"}

func runExec(ctx context.Context, e env, c *client.Client, job string, share int, command []string, interactive, tty bool) error {
	req := wire.ExecRequest{Share: share, Command: command, Stdin: interactive}
	stdin, _ := e.stdin.(*os.File)
	stdout, _ := e.stdout.(*os.File)
	if tty {
		switch {
		case stdin == nil || !term.IsTerminal(int(stdin.Fd())):
			fmt.Fprintln(e.stderr, "gpumesh: -t: standard input is not a terminal; running without one")
			tty = false
		default:
			req.TTY, req.Term = true, e.getenv("TERM")
			if cols, rows, err := term.GetSize(int(stdin.Fd())); err == nil {
				req.Rows, req.Cols = uint16(rows), uint16(cols)
			}
		}
	}
	t, err := c.Exec(ctx, job, req)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Field == "command" {
			fmt.Fprintf(e.stderr, "gpumesh: %s\n", ae.Message)
			return exitCodeError{exitCannotRun}
		}
		return apiError(err, execFlags)
	}
	session := wire.NewClient(t)
	var in io.Reader
	if interactive {
		in = e.stdin
	}
	if tty {
		old, err := term.MakeRaw(int(stdin.Fd()))
		if err != nil {
			t.Close()
			return fmt.Errorf("-t: %w", err)
		}
		defer term.Restore(int(stdin.Fd()), old)
		out := stdout
		if out == nil {
			out = stdin
		}
		stop := followSize(stdin, out, session)
		defer stop()
	} else {
		// Ctrl-C and SIGTERM go to the command; it decides whether to end.
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case s := <-sigs:
					name := "INT"
					if s == syscall.SIGTERM {
						name = "TERM"
					}
					_ = session.Signal(name)
				case <-done:
					return
				}
			}
		}()
	}
	code, sig, err := session.Copy(in, e.stdout, e.stderr)
	if err != nil {
		if tty {
			fmt.Fprint(e.stderr, "\r\n")
		}
		fmt.Fprintf(e.stderr, "gpumesh: exec in job %s: %v\n", job, err)
		return exitCodeError{exitBroken}
	}
	if sig != "" {
		code = 128 + signalNumber(sig)
	}
	if code != 0 {
		return exitCodeError{code & 0xff}
	}
	return nil
}

// signalNumber is the number of a signal by the name Go gives it
// (syscall.Signal's String), as a shell reports 128+N.
func signalNumber(name string) int {
	for n, s := range map[int]string{1: "hangup", 2: "interrupt", 3: "quit", 6: "aborted", 9: "killed", 13: "broken pipe", 15: "terminated"} {
		if s == name {
			return n
		}
	}
	return 0
}
