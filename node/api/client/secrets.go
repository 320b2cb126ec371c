package client

import (
	"context"
	"net/http"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// PutSecrets gives the node a job's secrets (POST /v1/secrets): values by
// variable name. The node keeps them for the owner for an hour, until a
// job submitted through it names them (put the answer in the spec's
// data.secrets); then only that job's runners receive them. The spec, and
// so the job's record, holds their names and a digest, never the values.
func (c *Client) PutSecrets(ctx context.Context, values map[string]string) (market.SecretsRef, error) {
	body, err := jsonBody(api.SecretsRequest{Values: values})
	if err != nil {
		return market.SecretsRef{}, err
	}
	var ref market.SecretsRef
	err = c.call(ctx, request{method: http.MethodPost, path: "/v1/secrets", body: body}, &ref)
	return ref, err
}
