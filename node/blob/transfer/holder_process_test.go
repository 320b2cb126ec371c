package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// A holder process: the test binary run again, with holderEnv set to the
// TCP multiaddr to listen on, holderTreeEnv to a directory and
// holderStoreEnv to a store directory, serves that tree from a libp2p
// host of its own, so that a test can put a holder in another network
// namespace (netns_linux_test.go). It speaks with the test on its
// standard streams, a line at a time:
//
//	ready PEER-ID MULTIADDR MANIFEST   once it serves the tree
//	read N                             at its Nth request to read; it answers
//	                                   the request once the test wrote "ok"
//	                                   (any other line refuses it)
//
// It ends when its standard input does.
const (
	holderEnv      = "GPUMESH_TRANSFER_TEST_HOLDER"
	holderTreeEnv  = "GPUMESH_TRANSFER_TEST_TREE"
	holderStoreEnv = "GPUMESH_TRANSFER_TEST_STORE"
)

func holderProcess() int {
	if err := runHolder(os.Getenv(holderEnv), os.Getenv(holderTreeEnv), os.Getenv(holderStoreEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	return 0
}

func runHolder(listen, tree, dir string) error {
	st, err := blob.Open(blob.Config{Dir: filepath.Join(dir, "blobs"), Limit: blob.NoLimit})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.SetLease(blob.Lease{ID: "src"}); err != nil {
		return err
	}
	put, err := st.Put(context.Background(), tree, "src")
	if err != nil {
		return err
	}
	h, err := libp2p.New(
		libp2p.ListenAddrStrings(listen),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
	)
	if err != nil {
		return err
	}
	defer h.Close()
	auth := &stdioAuth{lines: make(chan string)}
	svc, err := New(h, Config{Protocol: testProto, Store: st, Auth: auth})
	if err != nil {
		return err
	}
	defer svc.Close()
	if len(h.Addrs()) == 0 {
		return errors.New("no listen address")
	}
	auth.say("ready %s %s %s", h.ID(), h.Addrs()[0], put.Manifest)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		auth.lines <- in.Text()
	}
	close(auth.lines)
	return nil
}

// stdioAuth asks the test, on the process's standard streams, before
// each read.
type stdioAuth struct {
	mu    sync.Mutex // one question at a time
	reads int
	lines chan string
}

func (a *stdioAuth) say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func (a *stdioAuth) AllowRead(ctx context.Context, p peer.ID, m blob.Digest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads++
	a.say("read %d", a.reads)
	select {
	case line, ok := <-a.lines:
		if !ok || strings.TrimSpace(line) != "ok" {
			return errors.New("the test says no")
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *stdioAuth) AllowPush(context.Context, peer.ID, blob.Digest) (string, error) {
	return "", errors.New("this holder takes no pushes")
}
