// Command rendezvous is the job of the private network's tests: what
// torchrun's rendezvous and NCCL's TCP bootstrap do, over TCP alone.
//
//	rendezvous          (a gang's share: the variables gpumesh sets)
//	rendezvous sink PORT
//
// As a share, rank NODE_RANK of NNODES: rank 0 listens on
// MASTER_ADDR:MASTER_PORT (torchrun's store); every rank opens a listener
// on a port the kernel chooses on its own address, GPUMESH_PRIVATE_ADDR
// (as NCCL does on the interface NCCL_SOCKET_IFNAME names), and tells the
// master where; the master answers every rank with every rank's address;
// then each rank connects to the next one's (a ring) and they exchange a
// line. A worker retries the master until it answers, as a store client
// does. It prints "rank R of N: master ADDR, ring to RANK at ADDR:PORT ok"
// and exits 0, or says what failed and exits 1.
//
// As a sink it accepts connections on PORT (all addresses), reads each to
// its end and answers the number of bytes read.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "sink" {
		sink(os.Args[2])
		return
	}
	if err := share(); err != nil {
		fmt.Fprintln(os.Stderr, "rendezvous:", err)
		os.Exit(1)
	}
}

func sink(port string) {
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
	fmt.Println("sink listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			fmt.Fprintf(c, "%d\n", n)
		}()
	}
}

func env(name string) (int, error) {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0, fmt.Errorf("$%s: %q", name, os.Getenv(name))
	}
	return v, nil
}

func share() error {
	rank, err := env("NODE_RANK")
	if err != nil {
		return err
	}
	n, err := env("NNODES")
	if err != nil {
		return err
	}
	master := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	self := os.Getenv("GPUMESH_PRIVATE_ADDR")
	// NCCL's listener: a port chosen now, on this share's own address.
	ring, err := net.Listen("tcp", net.JoinHostPort(self, "0"))
	if err != nil {
		return fmt.Errorf("listening on %s: %w", self, err)
	}
	mine := ring.Addr().String()
	var addrs []string
	if rank == 0 {
		if addrs, err = serveStore(master, n, mine); err != nil {
			return err
		}
	} else if addrs, err = askStore(master, rank, mine); err != nil {
		return err
	}
	if len(addrs) != n {
		return fmt.Errorf("the master named %d ranks, want %d", len(addrs), n)
	}
	// The ring: answer the previous rank, call the next one.
	got := make(chan error, 1)
	go func() {
		c, err := ring.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		want := fmt.Sprintf("ring from %d\n", (rank+n-1)%n)
		if err != nil || line != want {
			got <- fmt.Errorf("the ring's previous rank said %q (%v), want %q", line, err, want)
			return
		}
		_, err = fmt.Fprintf(c, "ack from %d\n", rank)
		got <- err
	}()
	next := (rank + 1) % n
	c, err := dialRetry(addrs[next])
	if err != nil {
		return fmt.Errorf("the ring's next rank %d at %s: %w", next, addrs[next], err)
	}
	defer c.Close()
	fmt.Fprintf(c, "ring from %d\n", rank)
	line, err := bufio.NewReader(c).ReadString('\n')
	if want := fmt.Sprintf("ack from %d\n", next); err != nil || line != want {
		return fmt.Errorf("the ring's next rank %d answered %q (%v), want %q", next, line, err, want)
	}
	if err := <-got; err != nil {
		return err
	}
	fmt.Printf("rank %d of %d: master %s, ring to %d at %s ok\n", rank, n, master, next, addrs[next])
	return nil
}

// serveStore is rank 0: it takes every other rank's address and answers
// each with all of them, in rank order.
func serveStore(master string, n int, mine string) ([]string, error) {
	ln, err := net.Listen("tcp", master)
	if err != nil {
		return nil, fmt.Errorf("the master listening on %s: %w", master, err)
	}
	defer ln.Close()
	addrs := make([]string, n)
	addrs[0] = mine
	conns := map[int]net.Conn{}
	for len(conns) < n-1 {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		var r int
		var a string
		if _, err := fmt.Fscanf(c, "hello %d %s\n", &r, &a); err != nil || r < 1 || r >= n {
			c.Close()
			continue
		}
		addrs[r], conns[r] = a, c
	}
	for _, c := range conns {
		fmt.Fprintf(c, "peers %s\n", strings.Join(addrs, " "))
		c.Close()
	}
	return addrs, nil
}

// askStore is another rank: it tells the master its address until the
// master answers with every rank's.
func askStore(master string, rank int, mine string) ([]string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		addrs, err := func() ([]string, error) {
			c, err := net.DialTimeout("tcp", master, 5*time.Second)
			if err != nil {
				return nil, err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			fmt.Fprintf(c, "hello %d %s\n", rank, mine)
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return nil, err
			}
			f := strings.Fields(line)
			if len(f) < 1 || f[0] != "peers" {
				return nil, fmt.Errorf("the master said %q", line)
			}
			return f[1:], nil
		}()
		if err == nil || time.Now().After(deadline) {
			return addrs, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dialRetry(addr string) (net.Conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
