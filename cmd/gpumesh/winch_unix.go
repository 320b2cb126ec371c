//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// followSize tells the command's terminal each new size of the user's
// (SIGWINCH) until stop is called; stop returns once the goroutine has.
func followSize(in, _ *os.File, s *wire.Client) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGWINCH)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-sigs:
				if cols, rows, err := term.GetSize(int(in.Fd())); err == nil {
					_ = s.Resize(uint16(rows), uint16(cols))
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-exited
	}
}
