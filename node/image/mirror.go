package image

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Mirrors maps a registry ("docker.io", "nvcr.io", "127.0.0.1:5000") to the
// mirrors that serve its repositories under the same names, tried in order
// before it: Docker Hub is unreachable from many suppliers' networks. A
// mirror is trusted with nothing: every manifest and blob is fetched by
// digest and checked against it.
type Mirrors map[string][]Mirror

// Mirror is one registry mirror.
type Mirror struct {
	// Host is the mirror's host[:port].
	Host string
	// Insecure: the mirror speaks plain HTTP (an http:// URL).
	Insecure bool
}

// String is the mirror as a URL.
func (m Mirror) String() string {
	if m.Insecure {
		return "http://" + m.Host
	}
	return "https://" + m.Host
}

// ParseMirror reads REGISTRY=URL as `gpumesh node --registry-mirror`
// takes it: docker.io=https://mirror.example.com,
// nvcr.io=http://10.0.0.5:5000. The URL names a host and optionally a
// port, nothing else (a mirror serves repositories at its root).
func ParseMirror(s string) (registry string, m Mirror, err error) {
	reg, raw, ok := strings.Cut(s, "=")
	reg, raw = strings.TrimSpace(reg), strings.TrimSpace(raw)
	if !ok || reg == "" || raw == "" {
		return "", Mirror{}, fmt.Errorf("%q: want REGISTRY=URL, such as docker.io=https://mirror.example.com", s)
	}
	reg = canonicalRegistry(reg)
	if _, err := name.NewRegistry(reg, name.StrictValidation); err != nil {
		return "", Mirror{}, fmt.Errorf("%q: %q is not a registry host: %v", s, reg, err)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", Mirror{}, fmt.Errorf("%q: %q is not an http:// or https:// URL", s, raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return "", Mirror{}, fmt.Errorf("%q: a mirror URL names a host and port only, got %q", s, raw)
	}
	return reg, Mirror{Host: u.Host, Insecure: u.Scheme == "http"}, nil
}

// Add adds a mirror of registry, once.
func (ms Mirrors) Add(registry string, m Mirror) {
	registry = canonicalRegistry(registry)
	if !slices.Contains(ms[registry], m) {
		ms[registry] = append(ms[registry], m)
	}
}

// For returns the mirrors of the registry of repo.
func (ms Mirrors) For(repo name.Repository) []Mirror {
	return ms[canonicalRegistry(repo.RegistryStr())]
}

// canonicalRegistry spells Docker Hub one way: docker.io.
func canonicalRegistry(r string) string {
	switch r {
	case name.DefaultRegistry, "registry-1.docker.io", "docker.io":
		return "docker.io"
	}
	return r
}

// onMirror returns repo's name on mirror m.
func onMirror(repo name.Repository, m Mirror) (name.Repository, error) {
	opts := []name.Option{name.WeakValidation}
	if m.Insecure {
		opts = append(opts, name.Insecure)
	}
	return name.NewRepository(m.Host+"/"+repo.RepositoryStr(), opts...)
}
