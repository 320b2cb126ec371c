package market

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// DataSpec is what a job brings into its working directory from object
// storage before its command starts, what it sends back after the command
// ends, and the secrets its runners receive (the credentials of the
// object storage among them). Only the runner of an attempt reads the
// secrets' values, fetched from the node that holds them (Secrets.Holder);
// the spec, and so every record of the job, carries their names and a
// digest that the owner's signature covers.
type DataSpec struct {
	Inputs  []DataInput  `json:"inputs,omitempty"`
	Outputs []DataOutput `json:"outputs,omitempty"`
	Secrets *SecretsRef  `json:"secrets,omitempty"`
}

// DataInput is one input staged into the working directory: every object
// under From (an "s3://BUCKET/PREFIX" URL) as a file under To (a path
// inside the working directory, "." for itself), named by the rest of its
// key after the prefix.
type DataInput struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// DataOutput is one output sent after the command ends: every regular
// file under From (a path inside the working directory, "." for all of
// it) as an object under To (an "s3://BUCKET/PREFIX" URL).
type DataOutput struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// SecretsRef names a job's secrets: environment variables its runners
// receive from Holder, the node the owner gave them to, and no one else.
type SecretsRef struct {
	// Names are the variables' names, sorted.
	Names []string `json:"names"`
	// Digest is "sha256:" and 64 hex digits: of the secrets as the holder
	// keeps them, with a random nonce, so that it says nothing of the
	// values; a runner checks what it receives against it.
	Digest string `json:"digest"`
	// Holder is the peer ID of the node that keeps the values.
	Holder string `json:"holder"`
}

// Limits of a DataSpec.
const (
	MaxDataMounts = 16
	MaxSecrets    = 64
	maxURLLen     = 1024
)

// The names of the secrets that hold object storage credentials, as AWS
// tools name them.
const (
	SecretAccessKeyID     = "AWS_ACCESS_KEY_ID"
	SecretSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	SecretSessionToken    = "AWS_SESSION_TOKEN"
	SecretRegion          = "AWS_REGION"
	// SecretEndpointURL names a server other than AWS S3
	// ("https://minio.example.com:9000").
	SecretEndpointURL = "AWS_ENDPOINT_URL"
)

// S3Location is a parsed "s3://BUCKET/PREFIX" URL.
type S3Location struct {
	Bucket string
	Prefix string // "" or ending in "/"
}

func (l S3Location) String() string { return "s3://" + l.Bucket + "/" + l.Prefix }

// bucketName is what S3 allows a bucket to be named.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ParseS3URL reads "s3://BUCKET" or "s3://BUCKET/PREFIX". A prefix that
// does not end in "/" gets one: it names a folder, never part of a name.
func ParseS3URL(s string) (S3Location, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	switch {
	case !ok:
		return S3Location{}, fmt.Errorf("%q: want s3://BUCKET/PREFIX", clipText(s))
	case len(s) > maxURLLen || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return S3Location{}, fmt.Errorf("%q: at most %d bytes of printable UTF-8", clipText(s), maxURLLen)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	switch {
	case bucket == "":
		return S3Location{}, fmt.Errorf("%q has no bucket: want s3://BUCKET/PREFIX", clipText(s))
	case !bucketName.MatchString(bucket) || strings.Contains(bucket, ".."):
		return S3Location{}, fmt.Errorf("%q: bucket %q is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)", clipText(s), clipText(bucket))
	}
	for _, el := range strings.Split(strings.TrimSuffix(prefix, "/"), "/") {
		if el == "." || el == ".." || (el == "" && prefix != "") {
			return S3Location{}, fmt.Errorf("%q: the prefix has an empty, \".\" or \"..\" element", clipText(s))
		}
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return S3Location{Bucket: bucket, Prefix: prefix}, nil
}

// WorkPath checks a path inside the working directory ("/data", "data",
// "." or "/" for the directory itself) and returns it relative and clean:
// "data", or ".".
func WorkPath(p string) (string, error) {
	if len(p) > 1024 || !utf8.ValidString(p) || strings.ContainsAny(p, "\\\x00") {
		return "", fmt.Errorf("%q: at most 1024 bytes of UTF-8, no backslash or NUL", clipText(p))
	}
	rel := strings.Trim(p, "/")
	if rel == "" || rel == "." {
		return ".", nil
	}
	for _, el := range strings.Split(rel, "/") {
		switch el {
		case "", ".":
			return "", fmt.Errorf("%q has an empty or \".\" element", clipText(p))
		case "..":
			return "", fmt.Errorf("%q leaves the working directory", clipText(p))
		}
	}
	return rel, nil
}

func (d *DataSpec) validate(env map[string]string) error {
	if len(d.Inputs) > MaxDataMounts || len(d.Outputs) > MaxDataMounts {
		return specErr("data", "at most %d inputs and %d outputs, got %d and %d", MaxDataMounts, MaxDataMounts, len(d.Inputs), len(d.Outputs))
	}
	for i, in := range d.Inputs {
		if _, err := ParseS3URL(in.From); err != nil {
			return specErr(fmt.Sprintf("data.inputs[%d].from", i), "%v", err)
		}
		if _, err := WorkPath(in.To); err != nil {
			return specErr(fmt.Sprintf("data.inputs[%d].to", i), "%v", err)
		}
	}
	for i, out := range d.Outputs {
		if _, err := WorkPath(out.From); err != nil {
			return specErr(fmt.Sprintf("data.outputs[%d].from", i), "%v", err)
		}
		if _, err := ParseS3URL(out.To); err != nil {
			return specErr(fmt.Sprintf("data.outputs[%d].to", i), "%v", err)
		}
	}
	s := d.Secrets
	if s == nil {
		if len(d.Inputs)+len(d.Outputs) > 0 {
			return specErr("data.secrets", "object storage needs credentials: give the secrets %s and %s", SecretAccessKeyID, SecretSecretAccessKey)
		}
		return nil
	}
	if len(s.Names) == 0 || len(s.Names) > MaxSecrets {
		return specErr("data.secrets.names", "want 1 to %d names, got %d", MaxSecrets, len(s.Names))
	}
	for _, n := range s.Names {
		if err := CheckSecretName(n); err != nil {
			return specErr("data.secrets.names", "%v", err)
		}
		if _, ok := env[n]; ok {
			return specErr("data.secrets.names", "%s is both a secret and in env", n)
		}
	}
	if !slices.IsSorted(s.Names) || len(slices.Compact(slices.Clone(s.Names))) != len(s.Names) {
		return specErr("data.secrets.names", "want each name once, sorted")
	}
	if len(d.Inputs)+len(d.Outputs) > 0 && (!slices.Contains(s.Names, SecretAccessKeyID) || !slices.Contains(s.Names, SecretSecretAccessKey)) {
		return specErr("data.secrets", "object storage needs credentials: give the secrets %s and %s", SecretAccessKeyID, SecretSecretAccessKey)
	}
	if !sha256Digest.MatchString(s.Digest) {
		return specErr("data.secrets.digest", "want \"sha256:\" and 64 lower-case hex digits, got %q", clipText(s.Digest))
	}
	if s.Holder == "" || len(s.Holder) > maxIDLen || strings.ContainsFunc(s.Holder, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return specErr("data.secrets.holder", "want the peer ID of the node that holds the secrets, got %q", clipText(s.Holder))
	}
	return nil
}

// CheckSecretName checks a secret's name: a variable name, not one the
// executor sets (GPUMESH_…).
func CheckSecretName(n string) error {
	switch {
	case !envName.MatchString(n):
		return fmt.Errorf("%q: not a variable name", clipText(n))
	case strings.HasPrefix(n, "GPUMESH_"):
		return fmt.Errorf("%s: names starting with GPUMESH_ are set by the executor", n)
	}
	return nil
}

// Equal reports whether two data specs (either nil) say the same.
func (d *DataSpec) Equal(o *DataSpec) bool {
	if d == nil || o == nil {
		return d == nil && o == nil
	}
	if !slices.Equal(d.Inputs, o.Inputs) || !slices.Equal(d.Outputs, o.Outputs) {
		return false
	}
	if d.Secrets == nil || o.Secrets == nil {
		return d.Secrets == nil && o.Secrets == nil
	}
	return slices.Equal(d.Secrets.Names, o.Secrets.Names) && d.Secrets.Digest == o.Secrets.Digest && d.Secrets.Holder == o.Secrets.Holder
}
