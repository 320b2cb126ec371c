package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A node refuses a --listen port another socket holds, even one opened to
// be shared (SO_REUSEPORT, as libp2p opens it: a second node came up on
// the first one's port and advertised it), and --api alike: one line
// naming the port and the process that holds it (this test's), exit 1,
// and its data dir is left as it was.
func TestNodeRefusesATakenPort(t *testing.T) {
	shared := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	mesh, err := shared.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mesh.Close()
	api, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	meshPort, apiPort := mesh.Addr().(*net.TCPAddr).Port, api.Addr().(*net.TCPAddr).Port
	holder := fmt.Sprintf("is in use by pid %d (%s", os.Getpid(), os.Args[0])

	root := t.TempDir()
	data := filepath.Join(root, "gpumesh")
	listen := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", meshPort)
	code, _, errOut := runNode(t, map[string]string{}, "--data", data, "--api", "", "--listen", listen)
	if code != exitError {
		t.Errorf("--listen on a taken port: exit %d: %s", code, errOut)
	}
	oneLineErr(t, "--listen on a taken port", errOut, "node did not start: mesh: listen address "+listen+": ",
		fmt.Sprintf("TCP port %d %s", meshPort, holder))

	code, _, errOut = runNode(t, map[string]string{}, "--data", data, "--api", api.Addr().String(), "--listen", "/ip4/127.0.0.1/tcp/0")
	if code != exitError {
		t.Errorf("--api on a taken port: exit %d: %s", code, errOut)
	}
	oneLineErr(t, "--api on a taken port", errOut, "node did not start: api: "+api.Addr().String()+": ",
		fmt.Sprintf("TCP port %d %s", apiPort, holder))

	if got := listing(t, root); got != "[]" {
		t.Errorf("the refused starts left %s in %s", got, root)
	}
}
