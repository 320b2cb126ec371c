// Command replica is the program the tunnel tests run as a job: a small
// HTTP service, a TCP echo server and a TCP sink, on 127.0.0.1 of whatever
// network it runs in.
//
//	replica serve PORT   HTTP: /healthz (503 while ./unhealthy exists),
//	                     /whoami (share, epoch, pid), /chat (each line of
//	                     the request body answered as an event at once),
//	                     /bytes?n=N, anything else "hello from share S"
//	replica echo PORT    TCP: every byte back, until the client half-closes
//	replica sink PORT    TCP: read until the client half-closes, answer the
//	                     count of bytes read
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: replica serve|echo|sink PORT")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", ln.Addr())
	switch os.Args[1] {
	case "serve":
		err = http.Serve(ln, mux())
	case "echo":
		err = serveTCP(ln, func(c net.Conn) {
			io.Copy(c, c)
		})
	case "sink":
		err = serveTCP(ln, func(c net.Conn) {
			n, _ := io.Copy(io.Discard, c)
			fmt.Fprintf(c, "%d\n", n)
		})
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func serveTCP(ln net.Listener, handle func(net.Conn)) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

func mux() *http.ServeMux {
	share, epoch := os.Getenv("GPUMESH_SHARE"), os.Getenv("GPUMESH_EPOCH")
	m := http.NewServeMux()
	m.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat("unhealthy"); err == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, "ok")
	})
	m.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"share": share, "epoch": epoch, "pid": strconv.Itoa(os.Getpid())})
	})
	m.HandleFunc("/chat", func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		s := bufio.NewScanner(r.Body)
		for s.Scan() {
			fmt.Fprintf(w, "data: %s\n\n", s.Text())
			w.(http.Flusher).Flush()
		}
	})
	m.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k := min(n, len(buf))
			w.Write(buf[:k])
			n -= k
		}
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello from share %s: %s %s %s", share, r.Method, r.URL.RequestURI(), body)
	})
	return m
}
