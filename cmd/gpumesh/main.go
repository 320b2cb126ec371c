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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
