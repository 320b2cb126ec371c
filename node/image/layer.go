package image

import (
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpumesh/gpumesh/node/blob"
)

type v1Layer = v1.Layer

// storedLayer is a layer whose compressed bytes are a file in the blob
// store; go-containerregistry decompresses it.
type storedLayer struct {
	st *blob.Store
	m  blob.Digest
	l  Layer
	d  v1.Hash
}

func newStoredLayer(st *blob.Store, m blob.Digest, l Layer) (v1.Layer, error) {
	d, err := v1.NewHash(l.Digest)
	if err != nil {
		return nil, err
	}
	if types.MediaType(l.MediaType) == types.OCIUncompressedLayer || types.MediaType(l.MediaType) == types.DockerUncompressedLayer {
		return partial.UncompressedToLayer(&uncompressedStored{storedLayer{st, m, l, d}})
	}
	return partial.CompressedToLayer(&storedLayer{st: st, m: m, l: l, d: d})
}

func (s *storedLayer) Digest() (v1.Hash, error) { return s.d, nil }
func (s *storedLayer) Size() (int64, error)     { return s.l.Size, nil }
func (s *storedLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(s.l.MediaType), nil
}

// Compressed reads the stored bytes (each chunk checked by the store).
func (s *storedLayer) Compressed() (io.ReadCloser, error) {
	rc, _, err := s.st.OpenFile(s.m, layerFile)
	return rc, err
}

// uncompressedStored is a layer stored as a plain tar.
type uncompressedStored struct{ storedLayer }

func (u *uncompressedStored) DiffID() (v1.Hash, error) { return u.d, nil }
func (u *uncompressedStored) Uncompressed() (io.ReadCloser, error) {
	return u.Compressed()
}
