package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpumesh/gpumesh/node/api"
)

// Logs copies a share's output to w (GET /v1/jobs/{id}/logs) and returns the
// number of bytes copied. req names the job, the share (default 0), the
// attempt (its epoch; default the share's latest), the stream ("stdout" by default, or "stderr") and the offset to start from.
// With req.Follow it keeps copying while the attempt runs, until the node
// ends the stream or ctx ends (then the error wraps ctx.Err()). Logs has no
// timeout of its own: ctx bounds it.
func (c *Client) Logs(ctx context.Context, req api.LogRequest, w io.Writer) (int64, error) {
	q := url.Values{}
	if req.Share != 0 {
		q.Set("share", strconv.Itoa(req.Share))
	}
	if req.Epoch != 0 {
		q.Set("epoch", strconv.FormatUint(req.Epoch, 10))
	}
	if req.Stream != "" {
		q.Set("stream", req.Stream)
	}
	if req.Offset != 0 {
		q.Set("offset", strconv.FormatInt(req.Offset, 10))
	}
	if req.Follow {
		q.Set("follow", "1")
	}
	path := jobPath(req.Job, "/logs")
	resp, done, err := c.send(ctx, request{method: http.MethodGet, path: path, query: q, stream: true})
	if err != nil {
		return 0, err
	}
	defer done()
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return n, fmt.Errorf("logs of job %s: %w", req.Job, ctx.Err())
		}
		return n, fmt.Errorf("logs of job %s: the stream broke off after %d bytes: %w", req.Job, n, err)
	}
	return n, nil
}

// Checkpoint copies a share's latest checkpoint archive (GET
// /v1/jobs/{id}/checkpoint) to w and returns the number of bytes copied; a
// share without one is an *APIError matching ErrNotFound. The archive is
// the job's checkpoint directory as WriteTarGz writes it (a gzip'd tar). Only the job's owner may fetch it. ctx bounds the copy.
func (c *Client) Checkpoint(ctx context.Context, job string, share int, w io.Writer) (int64, error) {
	q := url.Values{}
	if share != 0 {
		q.Set("share", strconv.Itoa(share))
	}
	resp, done, err := c.send(ctx, request{method: http.MethodGet, path: jobPath(job, "/checkpoint"), query: q, stream: true})
	if err != nil {
		return 0, err
	}
	defer done()
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("checkpoint of job %s: broke off after %d bytes: %w", job, n, err)
	}
	return n, nil
}
