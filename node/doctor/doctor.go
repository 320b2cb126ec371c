// Package doctor checks a machine that a supplier is about to offer to the
// mesh: privileges, cgroups, the tools of the job sandbox, an OCI runtime,
// the GPU driver and cards, CDI specs, disk, the listen port, and where
// the machine stands in the mesh (reachability, NAT). It only reads: every
// fact comes through System, whose real implementation opens files, looks
// up programs and binds a port for an instant, and changes nothing.
//
//	results := doctor.Run(ctx, doctor.Config{System: doctor.OS(), DataDir: dir, ...})
//	if doctor.Failed(results) { ... }
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Status is a check's verdict.
type Status int

// The verdicts, from best to worst. Skip is a check that was not made
// (gpumesh doctor without --join does not ask the mesh).
const (
	OK Status = iota
	Skip
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Skip:
		return "SKIP"
	case Warn:
		return "WARN"
	}
	return "FAIL"
}

// MarshalText writes the status as String does ("OK", "WARN", ...).
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Result is one check's outcome: what was found, and what to do when it
// is not OK.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix,omitempty"`
}

var _ json.Marshaler = Results(nil)

// Results are the outcomes of Run, in check order.
type Results []Result

// MarshalJSON writes {"ok": bool, "checks": [...]}.
func (r Results) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		OK     bool     `json:"ok"`
		Checks []Result `json:"checks"`
	}{!r.Failed(), []Result(r)})
}

// Failed tells whether any check failed.
func (r Results) Failed() bool {
	for _, c := range r {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Summary counts the results by status: "12 checks: 9 OK, 2 WARN, 1 FAIL".
func (r Results) Summary() string {
	n := map[Status]int{}
	for _, c := range r {
		n[c.Status]++
	}
	parts := []string{}
	for _, s := range []Status{OK, Warn, Fail, Skip} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
		}
	}
	return fmt.Sprintf("%d checks: %s", len(r), strings.Join(parts, ", "))
}

// Run makes every check and returns their results in a fixed order. It
// never fails as a whole: a fact that cannot be read is a check's result.
func Run(ctx context.Context, cfg Config) Results {
	cfg = cfg.withDefaults()
	var out Results
	out = append(out, checkPrivileges(cfg))
	out = append(out, checkCgroups(cfg))
	out = append(out, checkTool(cfg, "nftables", "nft", "nftables"))
	out = append(out, checkTool(cfg, "iproute2", "ip", "iproute2"))
	out = append(out, checkOCIRuntime(cfg))
	cards := discover(ctx, cfg)
	out = append(out, checkDriver(cfg, cards))
	out = append(out, checkCards(cards))
	out = append(out, checkCDI(cfg, cards))
	out = append(out, checkDataDir(cfg)...)
	ports := checkPorts(cfg)
	out = append(out, ports.result)
	out = append(out, checkMesh(ctx, cfg, ports)...)
	return out
}
