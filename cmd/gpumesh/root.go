package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses of the gpumesh command.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad flags, arguments or input: nothing was done
)

// usageError marks an error in what the user typed or handed in. The command
// exits with status 2 and prints the message on one line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCodeError carries a specific exit status (for example a job's own exit
// code under `submit --wait`) without printing anything more.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// env is what a command may touch of the outside world: it is built by main and
// replaced in tests.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// systemConfig is the node configuration file of a machine that runs
	// gpumesh as a service (systemConfigFile); "" in tests, which must not
	// read the machine's own.
	systemConfig string
	// geteuid is the effective user ID (-1 where there is none, Windows);
	// nil reads as -1.
	geteuid func() int
}

// euid is the effective user ID, -1 where unknown.
func (e env) euid() int {
	if e.geteuid == nil {
		return -1
	}
	return e.geteuid()
}

// run executes the command line args and returns the process exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: osGetenv, geteuid: euidFunc()}
	if runtime.GOOS != "windows" {
		e.systemConfig = systemConfigFile
	}
	return runEnv(ctx, args, e)
}

func runEnv(ctx context.Context, args []string, e env) int {
	root := newRootCommand(e)
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var code exitCodeError
	if errors.As(err, &code) {
		return code.code
	}
	fmt.Fprintf(e.stderr, "gpumesh: %v\n", err)
	var usage usageError
	if errors.As(err, &usage) {
		return exitUsage
	}
	return exitError
}

func newRootCommand(e env) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpumesh",
		Short: "A peer-to-peer GPU supply mesh",
		Long: `gpumesh joins GPU suppliers into a mesh with no central server: every node
advertises its cards, takes part in an auction that places jobs on cards, runs
the jobs it wins, and moves work elsewhere when a peer disappears.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	commandGroup(root)
	root.AddCommand(
		newNodeCommand(e),
		newDoctorCommand(e),
		newVersionCommand(e),
		newCardsCommand(e),
		newOffersCommand(e),
		newSubmitCommand(e),
		newJobsCommand(e),
		newJobCommand(e),
		newBillCommand(e),
		newEarningsCommand(e),
		newLogsCommand(e),
		newCpCommand(e),
		newExecCommand(e),
		newPortForwardCommand(e),
		newCancelCommand(e),
		newScaleCommand(e),
		newPeersCommand(e),
		newStatusCommand(e),
		newKeyCommand(e),
		newDemoCommand(e),
		newBenchCommand(e),
	)
	return root
}

// commandGroup makes cmd, a command that only groups subcommands, print
// its help when given none and refuse an unknown one as a usage error
// (cobra's own answer exits 1 with several lines at the root, and prints
// the help with status 0 below it).
func commandGroup(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		hint := ""
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's default, which only its own lookup applies
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
		}
		return usagef("unknown command %q for %q%s; `%s --help` lists the commands", args[0], cmd.CommandPath(), hint, cmd.CommandPath())
	}
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}
