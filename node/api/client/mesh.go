package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// Peers lists the mesh's members as the node sees them (GET /v1/peers), the
// node itself first (Self set).
func (c *Client) Peers(ctx context.Context) ([]api.Peer, error) {
	var list api.PeerList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/peers"}, &list); err != nil {
		return nil, err
	}
	return list.Peers, nil
}

// Cards lists the node's own cards and what each is doing (GET /v1/cards).
func (c *Client) Cards(ctx context.Context) ([]api.Card, error) {
	var list api.CardList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/cards"}, &list); err != nil {
		return nil, err
	}
	return list.Cards, nil
}

// Status returns the node's operator summary (GET /v1/status) as raw JSON:
// its shape belongs to the node.
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/status"}, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// Drain asks the node to leave on purpose: it moves the shares it runs
// elsewhere and answers when none is left or timeout passes.
func (c *Client) Drain(ctx context.Context, timeout time.Duration) (api.DrainResult, error) {
	var res api.DrainResult
	body, err := json.Marshal(api.DrainRequest{Timeout: timeout.String()})
	if err != nil {
		return res, err
	}
	// The node answers when the drain is over: no request timeout.
	err = c.call(ctx, request{method: http.MethodPost, path: "/v1/drain", body: body, stream: true}, &res)
	return res, err
}

// Offers lists what the mesh sells as the node's book holds it (GET
// /v1/offers): the offers with a free card that match q, in q's order, and
// how many more match with none free. A bad q is an *APIError (400) whose
// Field names the parameter.
func (c *Client) Offers(ctx context.Context, q api.OfferQuery) (api.OfferList, error) {
	var list api.OfferList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/offers", query: q.Values()}, &list)
	return list, err
}
