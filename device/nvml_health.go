//go:build linux && cgo

package device

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Health watching follows NVIDIA's Kubernetes device plugin: register every
// device for critical-Xid and double-bit-ECC events on one NVML event set and
// wait on it. A critical Xid makes its card unhealthy unless it is one of the
// application Xids below, which a faulty job causes and the card survives.

// nvmlWatchedEvents are the NVML event types that make a card unhealthy.
const nvmlWatchedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

// ApplicationXids are the Xids a job's own fault raises and that leave the
// card healthy: 13 graphics engine exception, 31 GPU memory page fault, 43
// GPU stopped processing, 45 preemptive cleanup, 68 video processor
// exception, 109 context switch timeout. The same list as NVIDIA's device
// plugin.
func ApplicationXids() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

func isApplicationXid(xid uint64) bool {
	for _, x := range ApplicationXids() {
		if x == xid {
			return true
		}
	}
	return false
}

// Watch implements Backend: it sends an unhealthy event for a card on a
// critical Xid or a double-bit ECC error. A device whose supported events
// cannot be read, or that refuses registration for a reason other than "not
// supported", is reported unhealthy at once, as NVIDIA's device plugin does.
// If NVML stops delivering events, every card is reported unhealthy and Watch
// returns the error. Without NVML (ErrAbsent) there is nothing to watch and
// it returns nil at once.
func (n *NVIDIA) Watch(ctx context.Context, events chan<- HealthEvent) error {
	if err := n.open(); err != nil {
		if isAbsent(err) {
			return nil
		}
		return err
	}
	defer n.lib.Shutdown()
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml event set: %w", ret)
	}
	defer set.Free()
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml device count: %w", ret)
	}
	var all []string
	send := func(id string, h Health) bool {
		select {
		case events <- HealthEvent{CardID: id, Backend: NVMLBackendName, Health: h}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // Cards lists it unhealthy already
		}
		id, ret := d.GetUUID()
		if ret != nvml.SUCCESS || id == "" {
			continue
		}
		all = append(all, id)
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			if !send(id, Unhealthy("nvml GetSupportedEventTypes: %v", ret)) {
				return nil
			}
			continue
		}
		ret = d.RegisterEvents(nvmlWatchedEvents&supported, set)
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED: // too old to watch: not a fault
		default:
			if !send(id, Unhealthy("nvml RegisterEvents: %v", ret)) {
				return nil
			}
		}
	}
	timeout := uint32(n.waitTimeout.Milliseconds())
	for ctx.Err() == nil {
		e, ret := set.Wait(timeout)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			for _, id := range all {
				if !send(id, Unhealthy("nvml event wait: %v", ret)) {
					return nil
				}
			}
			return fmt.Errorf("%w: %v", errNVMLWait, ret)
		}
		h, ok := nvmlEventHealth(e)
		if !ok {
			continue
		}
		targets := all // an event without a device concerns them all
		if e.Device != nil {
			id, ret := e.Device.GetUUID()
			if ret != nvml.SUCCESS {
				continue
			}
			targets = []string{id}
		}
		for _, id := range targets {
			if !send(id, h) {
				return nil
			}
		}
	}
	return nil
}

// nvmlEventHealth turns an NVML event into a card's health. ok is false for
// events that do not change it.
func nvmlEventHealth(e nvml.EventData) (h Health, ok bool) {
	switch e.EventType {
	case nvml.EventTypeXidCriticalError:
		if isApplicationXid(e.EventData) {
			return Health{}, false
		}
		h = Unhealthy("critical Xid %d", e.EventData)
		h.LastXid = e.EventData
		return h, true
	case nvml.EventTypeDoubleBitEccError:
		return Unhealthy("double-bit ECC error"), true
	}
	return Health{}, false
}
