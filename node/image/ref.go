package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrBadReference is wrapped by the errors of ParseReference: the text is
// not an image reference.
var ErrBadReference = errors.New("not an image reference")

// ParseReference reads an image reference as people write it ("ubuntu",
// "ubuntu:22.04", "nvcr.io/nvidia/pytorch:24.05-py3", "repo@sha256:…").
// A name without a registry is on Docker Hub, without a tag "latest".
func ParseReference(ref string) (name.Reference, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadReference)
	}
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		// StrictValidation refuses a missing tag; accept it as "latest".
		if r2, err2 := name.ParseReference(ref); err2 == nil {
			return r2, nil
		}
		return nil, fmt.Errorf("%w: %q: %v", ErrBadReference, ref, err)
	}
	return r, nil
}

// Canonical writes a repository and a digest as a spec carries them:
// "registry/repository@sha256:…", with Docker Hub spelled docker.io.
func Canonical(repo name.Repository, digest string) string {
	reg := repo.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + repo.RepositoryStr() + "@" + digest
}

// Resolver turns tags into digests: what gpumesh submit does on the
// owner's machine before signing, so that the spec and the signature name
// the bits every share runs.
type Resolver struct {
	// Keychain gives credentials per registry (see DockerConfig).
	// Default: anonymous.
	Keychain authn.Keychain
	// Transport carries the requests. Default: http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds one resolution. Default 30 s.
	Timeout time.Duration
}

// Resolve returns ref by digest in canonical form (Canonical). A digest
// reference is checked to exist. The tag's digest is the one the registry
// serves for it: a manifest list's when it is one (each node then picks
// its platform's image from it).
func (r Resolver) Resolve(ctx context.Context, ref string) (string, error) {
	parsed, err := ParseReference(ref)
	if err != nil {
		return "", err
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kc := r.Keychain
	if kc == nil {
		kc = anonymous{}
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	if r.Transport != nil {
		opts = append(opts, remote.WithTransport(r.Transport))
	}
	desc, err := remote.Head(parsed, opts...)
	if err != nil {
		return "", RegistryError(parsed, err)
	}
	if d, ok := parsed.(name.Digest); ok && d.DigestStr() != desc.Digest.String() {
		return "", fmt.Errorf("%s: the registry serves %s under that digest", ref, desc.Digest)
	}
	return Canonical(parsed.Context(), desc.Digest.String()), nil
}

// RegistryError says in words what a registry's answer means for ref: no
// such image, credentials needed or refused, unreachable, too slow.
func RegistryError(ref name.Reference, err error) error {
	what := ref.String()
	reg := ref.Context().RegistryStr()
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: %s answered %d %s: the image is private or the credentials are wrong (log in with docker login %s; credentials are read from the docker config file)",
				what, reg, te.StatusCode, http.StatusText(te.StatusCode), reg)
		case http.StatusNotFound:
			return fmt.Errorf("%s: no such image on %s (unknown repository, tag or digest)", what, reg)
		case http.StatusTooManyRequests:
			return fmt.Errorf("%s: %s refuses more requests for now (429 Too Many Requests; a --registry-mirror helps)", what, reg)
		}
		return fmt.Errorf("%s: %s answered %d %s", what, reg, te.StatusCode, http.StatusText(te.StatusCode))
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: %s did not answer in time: %w", what, reg, err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: cannot reach %s: %v", what, reg, ue.Err)
	}
	if strings.Contains(err.Error(), "error verifying") {
		return fmt.Errorf("%s: %w: %v", what, ErrBadLayer, err)
	}
	if strings.Contains(err.Error(), "no child with platform") {
		return fmt.Errorf("%s: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
