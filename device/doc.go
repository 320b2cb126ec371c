// Package device is everything a node knows about its own accelerators:
// discovery through vendor backends (NVIDIA via NVML, vendor tools for AMD,
// Hygon, Moore Threads, Huawei Ascend and Kunlunxin, and a simulated backend),
// a catalog of card models with their published figures, card health, and the
// environment a job needs to see exactly the cards it was given.
//
// Card is the vendor-neutral record every other package uses. Catalog maps a
// raw device name and memory size to a model key such as "h100-sxm-80g"; a
// card the catalog does not know keeps a derived key starting with "x-" and an
// unknown (zero) compute-unit figure.
//
// # Backends
//
// A Backend lists one kind of card and watches its health (see its contract).
// NewNVIDIA reads NVML through the NVML interface, which go-nvml's nvml.New()
// and its mocks satisfy; it exists only in linux+cgo builds, elsewhere the
// NVIDIA backend reports itself absent. NewAMD, NewHygon, NewMThreads,
// NewAscend and NewKunlunxin run vendor tools through a Runner (ExecRunner in
// production, recorded output in tests). NewSim builds cards from a spec
// (ParseSimSpec: "h100-sxm-80g:8,rtx4090-48g:2") with IDs derived from a seed,
// and takes injected faults (SetHealth, Remove). A backend whose vendor has
// nothing on the node returns ErrAbsent; that is not a failure.
//
// Health follows NVIDIA's device plugin: a critical Xid or a double-bit ECC
// error makes a card unhealthy, the application Xids (ApplicationXids) do not.
//
// # Usage
//
// A node opens a Manager over every backend, offers its healthy cards, reacts
// to health events and refreshes telemetry now and then:
//
//	m, err := device.Open(ctx, device.Config{Logger: log}) // DefaultBackends
//	if err != nil {
//		return err
//	}
//	defer m.Close()
//	for _, st := range m.Statuses() {
//		log.Info("device backend", "backend", st.Backend, "state", st.State, "reason", st.Reason)
//	}
//	advertise(m.Cards())
//	for {
//		select {
//		case ev := <-m.Events(): // a card turned unhealthy, recovered, or left
//			withdrawOrRestore(ev)
//		case <-ticker.C:
//			if err := m.Refresh(ctx); err != nil {
//				return err
//			}
//			advertise(m.Cards())
//		case <-ctx.Done():
//			return nil
//		}
//	}
//
// A job started on some cards gets VisibleEnv(its cards, m.Cards()) added to
// its environment. A command that only prints the cards uses Discover, which
// starts no goroutine.
package device
