package imagetest

import (
	"io"
	"log"

	"github.com/google/go-containerregistry/pkg/authn"
)

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// basic is the authenticator of the registry's own pushes.
type basic struct{ user, pass string }

func (b *basic) Authorization() (*authn.AuthConfig, error) {
	return &authn.AuthConfig{Username: b.user, Password: b.pass}, nil
}
