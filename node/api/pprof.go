package api

import (
	"net/http"
	"net/http/pprof"
)

// pprofPrefix is where the node serves Go's runtime profiles
// (net/http/pprof): /debug/pprof/ lists them; profile?seconds=N is a CPU
// profile, trace?seconds=N an execution trace, heap, goroutine, mutex and
// block the others.
const pprofPrefix = "/debug/pprof/"

// profiles serves net/http/pprof to requests that carry the node's admin
// token, and to no one on a node without one: a profile shows the
// process's memory and stacks, job IDs and tokens among them, so neither
// an owner token nor an open loopback API is enough.
func profiles(cfg Config) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(pprofPrefix, pprof.Index)
	mux.HandleFunc(pprofPrefix+"cmdline", pprof.Cmdline)
	mux.HandleFunc(pprofPrefix+"profile", pprof.Profile)
	mux.HandleFunc(pprofPrefix+"symbol", pprof.Symbol)
	mux.HandleFunc(pprofPrefix+"trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := CallerFrom(r.Context())
		switch {
		case cfg.Token == "":
			writeJSON(w, http.StatusNotFound, Error{Error: "profiles are served only by a node with an API token (gpumesh node --api-token-file), to requests that carry it"})
		case !c.Admin:
			writeJSON(w, http.StatusForbidden, Error{Error: "profiles need the node's API token, not an owner's"})
		default:
			mux.ServeHTTP(w, r)
		}
	})
}
