//go:build !linux || !cgo

package probe

import (
	"context"
	"fmt"

	"github.com/gpumesh/gpumesh/device"
)

// CUDA is the NVIDIA probe backend; this build has none (it needs cgo on
// Linux): every card is answered as not probed.
type CUDA struct{}

var _ Backend = (*CUDA)(nil)

// NewCUDA returns the backend.
func NewCUDA() *CUDA { return &CUDA{} }

// Name implements Backend.
func (*CUDA) Name() string { return "cuda" }

// Run implements Backend.
func (*CUDA) Run(_ context.Context, ch Challenge, cards []device.Card) []CardAnswer {
	out := make([]CardAnswer, len(cards))
	for i, c := range cards {
		out[i] = CardAnswer{Card: c.ID, Model: c.Model, Index: i, Unprobed: true,
			Err: fmt.Sprintf("%v: this gpumesh was built without cgo", ErrNoBackend)}
		if _, ok := ch.Work[c.Model]; !ok {
			out[i].Unprobed, out[i].Err = false, "not asked"
		}
	}
	return out
}
