package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// Tunnel is an open tunnel into a job: its bytes (a forwarded connection)
// or its exec session's frames (see wire.Client).
type Tunnel = wire.HalfCloser

// Exec starts a command in a running job (POST /v1/jobs/{id}/exec) and
// returns the tunnel of its session once it runs: drive it with
// wire.NewClient. A command the job does not have is an *APIError with
// Field "command" (status 404). ctx bounds the opening only.
func (c *Client) Exec(ctx context.Context, job string, req wire.ExecRequest) (Tunnel, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	return c.upgrade(ctx, jobPath(job, "/exec"), body)
}

// Forward opens one connection to port inside a running job's share
// (POST /v1/jobs/{id}/forward): what is written reaches the port, what it
// answers is read. ctx bounds the opening only.
func (c *Client) Forward(ctx context.Context, job string, share, port int) (Tunnel, error) {
	body, err := jsonBody(wire.ForwardRequest{Share: share, Port: port})
	if err != nil {
		return nil, err
	}
	return c.upgrade(ctx, jobPath(job, "/forward"), body)
}

// upgrade makes a signed POST asking for the tunnel upgrade on a
// connection of its own, and returns that connection once the node
// answered 101.
func (c *Client) upgrade(ctx context.Context, path string, body []byte) (Tunnel, error) {
	u := c.base.String() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.Upgrade)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.key != nil {
		p := owner.SignRequest(*c.key, http.MethodPost, req.URL.RequestURI(), body, c.now())
		req.Header.Set(owner.Header, p.HeaderValue())
	}
	conn, err := c.dialAPI(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	br := bufio.NewReader(conn)
	err = req.Write(conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("POST %s: %w", path, ctx.Err())
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, readAPIError(http.MethodPost, path, resp)
	}
	if tc, ok := conn.(*net.TCPConn); ok && br.Buffered() == 0 {
		return tc, nil // nothing read ahead: the bare connection, which the kernel can splice
	}
	return &upgraded{Conn: conn, r: br}, nil
}

// dialAPI connects to the node's API as the client's requests do, without
// the HTTP client's pool: the connection becomes the tunnel's.
func (c *Client) dialAPI(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{Timeout: DialTimeout}
	host := c.base.Host
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		var dns *net.DNSError
		var op *net.OpError
		if errors.As(err, &op) || errors.As(err, &dns) {
			return nil, &UnreachableError{Addr: c.addr, Err: err}
		}
		return nil, err
	}
	if c.base.Scheme != "https" {
		return conn, nil
	}
	name, _, _ := net.SplitHostPort(host)
	tc := tls.Client(conn, &tls.Config{ServerName: name})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS with %s: %w", (&url.URL{Host: host}).Host, err)
	}
	return tc, nil
}

// upgraded is the connection after 101: reads go through what the
// response's reader buffered.
type upgraded struct {
	net.Conn
	r *bufio.Reader
}

func (u *upgraded) Read(p []byte) (int, error) { return u.r.Read(p) }

// CloseWrite tells the job's end that nothing more will be written.
func (u *upgraded) CloseWrite() error {
	if cw, ok := u.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return u.Conn.Close()
}
