package mesh

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// libp2p's resource-manager metrics (libp2p_rcmgr_*) are not served. To
// feed them the resource manager traces every stream and memory
// reservation, formatting a timestamp and looking up labelled series for
// each: 2.5 % of a busy node's CPU in the processes bench, for figures
// nobody here reads (`gpumesh status` and the dashboard use the node's own
// metrics). The resource manager runs with its metrics off
// (rcmgr.WithMetricsDisabled), and rcmgrFree keeps libp2p from registering
// its collectors, which would otherwise be served as zeros.

// rcmgrNamespace prefixes the resource manager's metric names.
const rcmgrNamespace = "libp2p_rcmgr_"

// rcmgrFree is a Registerer that registers every collector but the
// resource manager's.
type rcmgrFree struct{ prometheus.Registerer }

// Register registers c unless every metric it describes is the resource
// manager's; those it accepts and drops.
func (r rcmgrFree) Register(c prometheus.Collector) error {
	if ofRcmgr(c) {
		return nil
	}
	return r.Registerer.Register(c)
}

// MustRegister is Register that panics on an error, as prometheus's does.
func (r rcmgrFree) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c (false for a collector Register dropped).
func (r rcmgrFree) Unregister(c prometheus.Collector) bool {
	if ofRcmgr(c) {
		return false
	}
	return r.Registerer.Unregister(c)
}

// ofRcmgr reports whether c describes metrics and all of them are the
// resource manager's. A Desc does not export its name; its String does,
// as `fqName: "NAME"`.
func ofRcmgr(c prometheus.Collector) bool {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	n, all := 0, true
	for d := range ch {
		n++
		if !strings.Contains(d.String(), `fqName: "`+rcmgrNamespace) {
			all = false
		}
	}
	return n > 0 && all
}
