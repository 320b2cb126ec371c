package image

import (
	"context"
	"fmt"
	"sync"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// DockerConfig returns a keychain that reads registry credentials from the
// standard docker config file, dir/config.json (what `docker login`
// writes), and the credential helpers it names (credsStore, credHelpers).
// The caller chooses dir: $DOCKER_CONFIG, else ~/.docker. A missing file
// means anonymous access; a file that does not parse is an error naming
// it. The file is read at each resolution, so a `docker login` takes
// effect without a restart.
func DockerConfig(dir string) authn.Keychain { return &dockerConfig{dir: dir} }

type dockerConfig struct {
	dir string
	mu  sync.Mutex // the docker config package is not safe for concurrent loads
}

var _ authn.ContextKeychain = (*dockerConfig)(nil)

func (k *dockerConfig) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), r)
}

func (k *dockerConfig) ResolveContext(_ context.Context, r authn.Resource) (authn.Authenticator, error) {
	if k.dir == "" {
		return authn.Anonymous, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cf, err := config.Load(k.dir)
	if err != nil {
		return nil, fmt.Errorf("docker config in %s: %w", k.dir, err)
	}
	var empty types.AuthConfig
	// The repository's own entry first, then its registry's; Docker Hub
	// is filed under its historical key.
	for _, key := range []string{r.String(), r.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		cfg, err := cf.GetAuthConfig(key)
		if err != nil {
			return nil, fmt.Errorf("docker config in %s: credentials for %s: %w", k.dir, key, err)
		}
		cfg.ServerAddress = "" // set by GetAuthConfig; not a credential
		if cfg == empty {
			continue
		}
		return authn.FromConfig(authn.AuthConfig{Username: cfg.Username, Password: cfg.Password, Auth: cfg.Auth,
			IdentityToken: cfg.IdentityToken, RegistryToken: cfg.RegistryToken}), nil
	}
	return authn.Anonymous, nil
}

// anonymous is the keychain of no credentials.
type anonymous struct{}

func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }
