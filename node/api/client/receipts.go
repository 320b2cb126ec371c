package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// Bill returns a job's bill with its receipts (GET /v1/jobs/{id}/bill).
func (c *Client) Bill(ctx context.Context, id string) (api.Bill, error) {
	var b api.Bill
	err := c.call(ctx, request{method: http.MethodGet, path: jobPath(id) + "/bill"}, &b)
	return b, err
}

// ReceiptEarnings returns what the node's receipts say it is owed since
// since (zero: in all) (GET /v1/earnings).
func (c *Client) ReceiptEarnings(ctx context.Context, since time.Time) (api.ReceiptEarnings, error) {
	var e api.ReceiptEarnings
	path := "/v1/earnings"
	if !since.IsZero() {
		path += "?since=" + url.QueryEscape(since.UTC().Format(time.RFC3339))
	}
	err := c.call(ctx, request{method: http.MethodGet, path: path}, &e)
	return e, err
}
