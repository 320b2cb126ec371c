package portuse

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// checkBusy checks that addr's port is reported taken, by this process
// where the system tells.
func checkBusy(t *testing.T, network, addr string, port int) {
	t.Helper()
	err := Check(network, addr)
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("Check(%s, %s) = %v, want a BusyError", network, addr, err)
	}
	proto := network[:3]
	if busy.Port != port || busy.Network != proto || busy.Addr != addr {
		t.Errorf("BusyError %+v, want port %d over %s at %s", busy, port, proto, addr)
	}
	want := fmt.Sprintf("%s port %d is in use by ", strings.ToUpper(proto), port)
	if runtime.GOOS == "linux" {
		// This test process holds the port.
		want += fmt.Sprintf("pid %d (", os.Getpid())
		if !strings.Contains(busy.Command, filepath.Base(os.Args[0])) {
			t.Errorf("holder's command %q lacks %q", busy.Command, filepath.Base(os.Args[0]))
		}
	}
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

func TestCheckNamesWhoHoldsATCPPort(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	checkBusy(t, "tcp4", addr, ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	if err := Check("tcp4", addr); err != nil {
		t.Errorf("a port let go: %v", err)
	}
}

func TestCheckNamesWhoHoldsAUDPPort(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	checkBusy(t, "udp4", addr, pc.LocalAddr().(*net.UDPAddr).Port)
	pc.Close()
	if err := Check("udp4", addr); err != nil {
		t.Errorf("a port let go: %v", err)
	}
}

func TestExplainPassesOtherErrors(t *testing.T) {
	other := errors.New("no such host")
	if err := Explain("tcp", "nowhere:1", other); err != other {
		t.Errorf("Explain = %v, want the error as it was", err)
	}
	if err := Explain("tcp", "x:1", nil); err != nil {
		t.Errorf("Explain(nil) = %v", err)
	}
	if err := Check("tcp4", "127.0.0.1:0"); err != nil {
		t.Errorf("port 0: %v", err)
	}
}

// The ports picked together are distinct, and free: each can be listened
// on once the call returns.
func TestFreeLoopbackPortsAreDistinctAndFree(t *testing.T) {
	ports, err := FreeLoopback(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d picked twice: %v", p, ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		ln.Close()
	}
}
