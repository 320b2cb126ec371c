// Command gpumesh is the one binary of gpumesh: a supplier runs `gpumesh node`,
// a job owner runs `gpumesh submit`, an operator runs `gpumesh status`.
//
// This package reads flags, files, the environment and signals, and formats
// output. Everything else lives in the packages it calls.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumesh/gpumesh/node/fence"
)

func main() {
	// A node's fence keeper is this binary under a hidden first argument
	// (fence.Command). It is no command: it runs before flags are parsed and
	// before signals are caught, since its life is tied to its stdin alone.
	if isFenceKeeper(os.Args) {
		os.Exit(fence.Main(os.Stdin, os.Stdout))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// isFenceKeeper tells whether the command line args (os.Args) runs the fence
// keeper: exactly the binary and fence.Subcommand.
func isFenceKeeper(args []string) bool {
	return len(args) == 2 && args[1] == fence.Subcommand
}
