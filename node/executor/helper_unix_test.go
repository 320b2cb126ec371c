//go:build unix

package executor

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a helper program instead of the tests:
// a job (or an exec in it) that does what bash alone cannot.
const helperEnv = "EXECUTOR_TEST_HELPER"

// runHelper is the helper program:
//
//   - "listen PORT": accept connections on 127.0.0.1:PORT and echo each
//     line back prefixed with "echo: ", after printing "listening";
//     "listen-addr HOST:PORT" the same on HOST:PORT;
//   - "tty": print the terminal's size as "size ROWS COLS", again at each
//     SIGWINCH, and at SIGINT print "interrupted" and exit 3;
//   - "exit CODE": exit with CODE.
func runHelper(mode string, args []string) int {
	switch mode {
	case "listen", "listen-addr":
		addr := "127.0.0.1:" + args[0]
		if mode == "listen-addr" {
			addr = args[0]
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			go func() {
				defer c.Close()
				r := bufio.NewScanner(c)
				for r.Scan() {
					fmt.Fprintf(c, "echo: %s\n", r.Text())
				}
			}()
		}
	case "tty":
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGINT)
		printSize := func() {
			ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
			if err != nil {
				fmt.Println("no terminal:", err)
				return
			}
			fmt.Printf("size %d %d\n", ws.Row, ws.Col)
		}
		printSize()
		for s := range sigs {
			if s == syscall.SIGINT {
				fmt.Println("interrupted")
				return 3
			}
			printSize()
		}
	case "exit":
		code, _ := strconv.Atoi(args[0])
		io.Copy(os.Stdout, os.Stdin)
		return code
	}
	return 2
}
