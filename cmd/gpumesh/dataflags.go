package main

import (
	"strings"

	"github.com/gpumesh/gpumesh/market"
)

// dataFlags are submit's --input, --output and --secret.
type dataFlags struct {
	inputs, outputs, secrets []string
}

// localInput is a local directory an --input names: the job's payload.
type localInput struct {
	dir, path string
}

// splitDest cuts "SRC:PATH" at its last colon; a source alone goes to
// the working directory itself. A colon right after one letter is a
// Windows drive ("C:\data"), not a destination.
func splitDest(s string) (src, dest string) {
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.HasSuffix(s[:i+1], "s3:") || (i == 1 && len(s) > 2 && (s[2] == '\\' || s[2] == '/')) {
		return s, "."
	}
	return s[:i], s[i+1:]
}

// data reads the flags into a data spec (its secrets still to be given
// to the node), the values of the secrets, and a local input if one was
// named. getenv supplies a secret given by name alone.
func (f dataFlags) data(getenv func(string) string) (*market.DataSpec, map[string]string, *localInput, error) {
	d := &market.DataSpec{}
	var local *localInput
	for _, in := range f.inputs {
		src, dest := splitDest(in)
		to, err := market.WorkPath(dest)
		if err != nil {
			return nil, nil, nil, usagef("--input %q: %v", in, err)
		}
		if !strings.HasPrefix(src, "s3://") && !strings.Contains(src, "://") {
			if local != nil {
				return nil, nil, nil, usagef("--input %q: one local directory per job (the first was %s): put them in one", in, local.dir)
			}
			local = &localInput{dir: src, path: to}
			continue
		}
		if _, err := market.ParseS3URL(src); err != nil {
			return nil, nil, nil, usagef("--input: %v", err)
		}
		d.Inputs = append(d.Inputs, market.DataInput{From: src, To: to})
	}
	for _, out := range f.outputs {
		from, to, ok := strings.Cut(out, ":s3://")
		if !ok {
			return nil, nil, nil, usagef("--output %q: want PATH:s3://BUCKET/PREFIX (a path in the working directory, a colon, where it goes)", out)
		}
		to = "s3://" + to
		rel, err := market.WorkPath(from)
		if err != nil {
			return nil, nil, nil, usagef("--output %q: %v", out, err)
		}
		if _, err := market.ParseS3URL(to); err != nil {
			return nil, nil, nil, usagef("--output: %v", err)
		}
		d.Outputs = append(d.Outputs, market.DataOutput{From: rel, To: to})
	}
	values := map[string]string{}
	for _, s := range f.secrets {
		name, value, given := strings.Cut(s, "=")
		if err := market.CheckSecretName(name); err != nil {
			return nil, nil, nil, usagef("--secret %q: %v", name, err)
		}
		if !given {
			if value = getenv(name); value == "" {
				return nil, nil, nil, usagef("--secret %s: $%s is not set here (give NAME=VALUE, or set it)", name, name)
			}
		}
		values[name] = value
	}
	if len(d.Inputs)+len(d.Outputs) > 0 {
		var lack []string
		for _, k := range []string{market.SecretAccessKeyID, market.SecretSecretAccessKey} {
			if _, ok := values[k]; !ok {
				lack = append(lack, k)
			}
		}
		if len(lack) > 0 {
			return nil, nil, nil, usagef("--input/--output in object storage need its credentials: --secret %s (from your environment, or NAME=VALUE)", strings.Join(lack, " --secret "))
		}
	}
	if len(d.Inputs)+len(d.Outputs)+len(values) == 0 {
		d = nil
	}
	return d, values, local, nil
}
