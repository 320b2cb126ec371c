//go:build !unix

package main

import (
	"os"
	"time"

	"golang.org/x/term"

	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// followSize tells the command's terminal each new size of the user's
// until stop is called. Windows has no SIGWINCH: the console's size is
// looked at four times a second.
func followSize(_, out *os.File, s *wire.Client) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		lastCols, lastRows, _ := term.GetSize(int(out.Fd()))
		for {
			select {
			case <-tick.C:
				cols, rows, err := term.GetSize(int(out.Fd()))
				if err == nil && (cols != lastCols || rows != lastRows) {
					lastCols, lastRows = cols, rows
					_ = s.Resize(uint16(rows), uint16(cols))
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
