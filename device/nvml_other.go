//go:build !(linux && cgo)

package device

import (
	"context"
	"fmt"
	"runtime"
)

// NVMLBackendName is the Name of the NVIDIA backend.
const NVMLBackendName = "nvml"

// noNVML stands in for the NVIDIA backend in builds without it (no cgo, or
// not Linux): always absent, saying why.
type noNVML struct{}

func defaultNVIDIA(*Catalog) Backend { return noNVML{} }

func (noNVML) Name() string { return NVMLBackendName }

func (noNVML) Cards(context.Context) ([]Card, error) {
	return nil, fmt.Errorf("%w: this gpumesh was built without the NVIDIA backend (needs linux and cgo; built for %s, cgo off or unavailable)",
		ErrAbsent, runtime.GOOS)
}

func (noNVML) Watch(context.Context, chan<- HealthEvent) error { return nil }
