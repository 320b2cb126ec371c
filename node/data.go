package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/objstore"
)

// Inputs and outputs in object storage (market.DataSpec): the runner
// stages each input into the attempt's working directory after the
// payload and before the command starts, and sends each output after the
// command ended (before it keeps the working directory, files.go),
// with the credentials among the job's secrets (secrets.go). A failed
// input fails the start, naming it; a failed output is the attempt's
// reason on its record ("exit status 0: output out → s3://…: …").

// withSecrets is a job's environment with its secrets added.
func withSecrets(env, secrets map[string]string) map[string]string {
	if len(secrets) == 0 {
		return env
	}
	out := make(map[string]string, len(env)+len(secrets))
	maps.Copy(out, env)
	maps.Copy(out, secrets)
	return out
}

// workInto returns an attempt's Work hook: what fills its work directory
// before the command starts (its payload, then its inputs). nil when
// there is nothing to do.
func (n *Node) workInto(e market.Execution, secrets map[string]string) func(dir string) error {
	var steps []func(string) error
	if f := n.payloadInto(e); f != nil {
		steps = append(steps, f)
	}
	if d := e.Exec.Data; d != nil && len(d.Inputs) > 0 {
		steps = append(steps, func(dir string) error { return n.stageInputs(e, d.Inputs, secrets, dir) })
	}
	if len(steps) == 0 {
		return nil
	}
	return func(dir string) error {
		for _, f := range steps {
			if err := f(dir); err != nil {
				return err
			}
		}
		return nil
	}
}

// objectStore is the client of the object storage a job's secrets name.
func (n *Node) objectStore(secrets map[string]string) (*objstore.Client, error) {
	return objstore.New(objstore.CredentialsFrom(secrets), nil)
}

// stageInputs downloads each input into dir.
func (n *Node) stageInputs(e market.Execution, inputs []market.DataInput, secrets map[string]string, dir string) error {
	c, err := n.objectStore(secrets)
	if err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	defer c.Close()
	for _, in := range inputs {
		loc, err := market.ParseS3URL(in.From)
		if err != nil {
			return fmt.Errorf("input %s: %w", in.From, err)
		}
		rel, err := market.WorkPath(in.To)
		if err != nil {
			return fmt.Errorf("input %s: %w", in.From, err)
		}
		start := time.Now()
		st, err := c.Download(n.ctx, loc, filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Errorf("input %s: %w", loc, err)
		}
		n.log.Info("input staged", "job", e.Job, "share", e.Share, "epoch", e.Epoch, "from", loc.String(), "to", rel,
			"objects", st.Objects, "bytes", st.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// sendOutputs uploads each output of an ended attempt, and returns what
// went wrong for the attempt's reason ("" when all went).
func (n *Node) sendOutputs(log *slog.Logger, e market.Execution, secrets map[string]string, dir string) string {
	d := e.Exec.Data
	if d == nil || len(d.Outputs) == 0 {
		return ""
	}
	c, err := n.objectStore(secrets)
	if err != nil {
		return "outputs not sent: " + err.Error()
	}
	defer c.Close()
	var failed []string
	for _, out := range d.Outputs {
		rel, err := market.WorkPath(out.From)
		if err == nil {
			var loc market.S3Location
			if loc, err = market.ParseS3URL(out.To); err == nil {
				var st objstore.Stats
				var skipped int
				st, skipped, err = c.Upload(n.ctx, filepath.Join(dir, filepath.FromSlash(rel)), loc)
				if err == nil {
					log.Info("output sent", "from", rel, "to", loc.String(), "objects", st.Objects, "bytes", st.Bytes, "skipped", skipped)
					continue
				}
			}
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%s is not in the working directory", out.From)
		}
		log.Warn("output not sent", "from", out.From, "to", out.To, "err", err)
		failed = append(failed, fmt.Sprintf("output %s → %s: %v", out.From, out.To, err))
	}
	if len(failed) == 0 {
		return ""
	}
	return fmt.Sprintf("%s of %s not sent: %s", text.Count(len(failed), "output"), text.Count(len(d.Outputs), "output"), strings.Join(failed, "; "))
}
