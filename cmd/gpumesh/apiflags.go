package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

// Environment variables of the commands that talk to a node's API.
const (
	envAPI      = "GPUMESH_API"       // the API address, when --api is not given
	envAPIToken = "GPUMESH_API_TOKEN" // the token itself, when --api-token-file is not given
)

// apiFlags are the flags every command that talks to a node's API takes.
// Every request is signed with the owner key when there is one; owner says
// the command acts on jobs and needs an owner (a key, or a token that may be
// an owner token).
type apiFlags struct {
	addr      string
	tokenFile string
	key       keyFlag
	owner     bool
	flags     *pflag.FlagSet // the command's, to tell --api "" from no --api
}

func (f *apiFlags) register(cmd *cobra.Command) {
	f.flags = cmd.Flags()
	cmd.Flags().StringVar(&f.addr, "api", "", "the node's API: host:port or http(s)://host:port (default $"+envAPI+", else "+api.DefaultAddr+")")
	cmd.Flags().StringVar(&f.tokenFile, "api-token-file", "", "read the API token from `FILE` (default: $"+envAPIToken+" holds the token; a node on loopback needs none)")
	f.key.register(cmd)
}

// registerOwner is register for a command that acts on the owner's jobs.
func (f *apiFlags) registerOwner(cmd *cobra.Command) {
	f.register(cmd)
	f.owner = true
}

// jobClient checks a job ID, then makes the client that asks about it.
func (f *apiFlags) jobClient(e env, id string) (*client.Client, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	return f.client(e)
}

// client builds the API client from the flags and the environment; extra
// are options beyond the flags' (submit's retries). Bad values are usage
// errors naming where they came from.
func (f *apiFlags) client(e env, extra ...client.Option) (*client.Client, error) {
	addr, from := f.addr, "--api"
	if addr == "" && f.flags != nil && f.flags.Changed("api") {
		return nil, usagef("--api: empty address: want host:port, such as %s", api.DefaultAddr)
	}
	if addr == "" {
		addr, from = e.getenv(envAPI), envAPI
	}
	if addr == "" {
		addr = api.DefaultAddr
	}
	if _, err := client.New(addr); err != nil {
		return nil, usagef("%s: %v", from, err)
	}
	token, tokenFrom := "", ""
	switch {
	case f.tokenFile != "":
		data, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, usagef("--api-token-file: %v", err)
		}
		token, tokenFrom = strings.TrimSpace(string(data)), "--api-token-file "+f.tokenFile
		if token == "" {
			return nil, usagef("--api-token-file: %s is empty", f.tokenFile)
		}
	case strings.TrimSpace(e.getenv(envAPIToken)) != "":
		token, tokenFrom = strings.TrimSpace(e.getenv(envAPIToken)), envAPIToken
	}
	key, keyPath, err := f.key.load(e, !f.owner || token != "")
	if err != nil {
		return nil, err
	}
	if f.owner && key == nil && token == "" {
		return nil, fmt.Errorf("no owner key at %s: your jobs belong to your key; make one with `gpumesh key create` (or give --key, $%s, or an owner token)", keyPath, envKey)
	}
	opts := extra
	if key != nil {
		opts = append(opts, client.WithOwnerKey(*key))
	}
	if token == "" {
		return client.New(addr, opts...)
	}
	c, err := client.New(addr, append(opts, client.WithToken(token))...)
	if err != nil {
		return nil, usagef("%s: %v", tokenFrom, strings.TrimPrefix(err.Error(), "client: "))
	}
	return c, nil
}

// apiError turns an error of the API client into what the user reads:
//   - the node could not be reached: say where, and that a node may not be
//     running there (exit 1);
//   - the node refused bad input (400, 413, 415): a usage error naming the
//     flag behind the offending field, through flags (exit 2);
//   - a missing or wrong token: say how to give one (exit 1);
//   - any other answer: the node's own message (exit 1).
func apiError(err error, flags map[string]string) error {
	var ue *client.UnreachableError
	if errors.As(err, &ue) {
		return fmt.Errorf("%v; is `gpumesh node` running there? (--api or %s names another node)", err, envAPI)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case client.IsBadInputStatus(ae.Status):
		msg := ae.Message
		flag, exact := flagFor(flags, ae.Field)
		if ae.Field != "" && !exact && !strings.Contains(msg, ae.Field) {
			msg = ae.Field + ": " + msg // a nested field, or one without a flag
		}
		if flag != "" {
			msg = flag + ": " + msg
		}
		return usageError{errors.New(msg)}
	case errors.Is(err, client.ErrUnauthorized) && strings.Contains(ae.Message, "API token"):
		return fmt.Errorf("the node refused the request: %s (give the token with --api-token-file or %s)", ae.Message, envAPIToken)
	case errors.Is(err, client.ErrUnauthorized):
		return fmt.Errorf("the node refused the request: %s (your owner key: --key or $%s; `gpumesh key show` prints its ID)", ae.Message, envKey)
	case errors.Is(err, client.ErrForbidden):
		return fmt.Errorf("%s (`gpumesh key show` prints the owner you act as)", ae.Message)
	case errors.Is(err, client.ErrNoRoom):
		if flag, _ := flagFor(flags, ae.Field); flag != "" {
			return fmt.Errorf("%s: %s", flag, ae.Message)
		}
	}
	return errors.New(ae.Message)
}

// fieldRoot is the top-level JSON field of a field path: "models[1]" and
// "models" → "models", "layout.per_node" → "layout".
func fieldRoot(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return field
}
