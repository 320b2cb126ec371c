package node

import (
	"math"
	"sync/atomic"
	"time"
)

// lagMeter smooths how late the driver takes its ticks: a tick waits in
// its channel while the driver is busy or the process gets no CPU, so its
// lateness is how far the node falls behind its own work. The driver
// observes; any goroutine reads.
type lagMeter struct {
	bits atomic.Uint64 // float64 seconds, smoothed
}

// lagWeight is the weight of each new observation: with a tick every
// 20 ms, the mean follows a change of load within a few tenths of a second.
const lagWeight = 0.1

// observe adds one tick's lateness. Driver only (one writer).
func (m *lagMeter) observe(late time.Duration) {
	old := math.Float64frombits(m.bits.Load())
	m.bits.Store(math.Float64bits(old + lagWeight*(late.Seconds()-old)))
}

// smoothed is the smoothed lateness.
func (m *lagMeter) smoothed() time.Duration {
	return time.Duration(math.Float64frombits(m.bits.Load()) * float64(time.Second))
}

// load is the smoothed lateness in tenths of a second: 0 for a node that
// keeps up, 1 for one about 100 ms behind; the advertiser stretches its
// interval between ads of changes by 1+load (gossip.AdvertiserConfig.Load).
func (m *lagMeter) load() float64 { return m.smoothed().Seconds() * 10 }
