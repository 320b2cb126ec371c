//go:build linux && cgo

package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// rtx4090x48 is a custom go-nvml mock config: the modified 48 GB RTX 4090
// sold in China, which reports the same name as the 24 GB card.
var rtx4090x48 = gpus.Config{
	Name:         "NVIDIA GeForce RTX 4090",
	Architecture: nvml.DEVICE_ARCH_ADA,
	Brand:        nvml.BRAND_GEFORCE_RTX,
	MemoryMB:     49140,
	CudaMajor:    8,
	CudaMinor:    9,
	PciDeviceId:  0x268410DE,
}

var rtx4090x24 = func() gpus.Config { c := rtx4090x48; c.MemoryMB = 24564; return c }()

// dgxBusIDs are the PCI buses of the eight GPUs of a DGX H100 or H200.
var dgxBusIDs = []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"}

// mockNode is a go-nvml mock server made usable by the backend, and an
// event queue its event set delivers from.
type mockNode struct {
	*server.Server
	events chan nvml.EventData

	mu         sync.Mutex
	registered map[int]uint64 // device index → event mask registered
}

// newMockNode fills in what the go-nvml mocks leave unset (an unset mock
// method panics): telemetry, event registration, an event set; and gives
// every device a PCI bus id in NVML's own form ("00000000:2A:00.0",
// upper-case, 8-digit domain), which the backend must normalize.
func newMockNode(t *testing.T, s *server.Server) *mockNode {
	t.Helper()
	n := &mockNode{Server: s, events: make(chan nvml.EventData, 64), registered: map[int]uint64{}}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-n.events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		bus := fmt.Sprintf("00000000:%s:00.0", dgxBusIDs[i%len(dgxBusIDs)])
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: dev.Config.PciDeviceId, PciSubSystemId: 0x16c110de}
			for j := range bus {
				p.BusId[j] = int8(bus[j])
			}
			return p, nvml.SUCCESS
		}
		dev.GetSerialFunc = func() (string, nvml.Return) { return fmt.Sprintf("16549220%05d", i), nvml.SUCCESS }
		dev.GetBoardPartNumberFunc = func() (string, nvml.Return) { return "692-2G520-0200-000", nvml.SUCCESS }
		dev.GetMaxClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
			if t == nvml.CLOCK_MEM {
				return 2619, nvml.SUCCESS
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(30 + i), nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100000 + 1500*i), nvml.SUCCESS }
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.registered[i] = mask
			return nvml.SUCCESS
		}
	}
	return n
}

func (n *mockNode) dev(i int) *server.Device { return n.Devices[i].(*server.Device) }

func (n *mockNode) xid(i int, xid uint64) {
	n.events <- nvml.EventData{Device: n.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

func testNVIDIA(lib NVML) *NVIDIA {
	b := NewNVIDIA(lib, DefaultCatalog())
	b.waitTimeout = 20 * time.Millisecond
	return b
}

func TestNVMLDGXServers(t *testing.T) {
	cases := []struct {
		name  string
		srv   *server.Server
		model string
		mem   uint64
		cu    float64
	}{
		{"DGX H100", dgxh100.New(), "h100-sxm-80g", 81920, 3.17},
		{"DGX H200", dgxh200.New(), "h200-141g", 144384, 3.17},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := newMockNode(t, tc.srv)
			node.dev(6).SetMigMode(nvml.DEVICE_MIG_ENABLE)
			cards := cardsOf(t, testNVIDIA(node))
			if len(cards) != 8 {
				t.Fatalf("got %d cards, want 8", len(cards))
			}
			for i, c := range cards {
				want := Card{
					ID: node.dev(i).UUID, Vendor: VendorNVIDIA, Model: tc.model, Name: node.dev(i).Config.Name,
					Known: true, UUID: node.dev(i).UUID, Index: i,
					PCIBusID: "0000:" + strings.ToLower(dgxBusIDs[i]) + ":00.0", Backend: "nvml",
					MemoryMiB: tc.mem, MemoryFreeMiB: 0, Arch: "hopper", ComputeCapability: "9.0", MIG: i == 6,
					ComputeUnits: tc.cu, BandwidthGBs: cards[i].BandwidthGBs,
					Telemetry: Telemetry{UtilizationPct: uint32(10 * i), TemperatureC: uint32(30 + i), PowerW: 100 + 1.5*float64(i)},
					Health:    Healthy(),
				}
				if c.Evidence == nil || c.Evidence.Serial == "" {
					t.Errorf("card %d: no evidence (%+v)", i, c.Evidence)
				}
				c.Evidence = nil // TestNVIDIAReportsHardwareEvidence checks it
				if c != want {
					t.Errorf("card %d:\n got %+v\nwant %+v", i, c, want)
				}
			}
		})
	}
}

// An RTX 4090 with 48 GB reports the same name as the 24 GB one; memory
// tells them apart.
func TestNVMLRTX4090Custom(t *testing.T) {
	srv, err := server.New(server.WithGPUs(rtx4090x48, rtx4090x48, rtx4090x24),
		server.WithDriverVersion("570.124.04"), server.WithNVMLVersion("12.570.124.04"), server.WithCUDADriverVersion(12080))
	if err != nil {
		t.Fatal(err)
	}
	cards := cardsOf(t, testNVIDIA(newMockNode(t, srv)))
	if len(cards) != 3 {
		t.Fatalf("got %d cards", len(cards))
	}
	for i, want := range []string{"rtx4090-48g", "rtx4090-48g", "rtx4090-24g"} {
		c := cards[i]
		if c.Model != want || c.Name != "NVIDIA GeForce RTX 4090" || c.Arch != "ada" || c.ComputeCapability != "8.9" ||
			c.ComputeUnits != 0.529 {
			t.Errorf("card %d = %+v, want model %s", i, c, want)
		}
	}
	if cards[0].MemoryMiB != 49140 || cards[2].MemoryMiB != 24564 {
		t.Errorf("memory = %d, %d", cards[0].MemoryMiB, cards[2].MemoryMiB)
	}
}

func TestNVMLLostGPUIsListedUnhealthy(t *testing.T) {
	node := newMockNode(t, dgxh100.New())
	node.dev(2).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	node.dev(4).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	cards := cardsOf(t, testNVIDIA(node))
	if h := cards[2].Health; h.Healthy || !strings.Contains(h.Reason, "GetMemoryInfo") || !strings.Contains(h.Reason, "GPU_IS_LOST") {
		t.Errorf("lost GPU health = %+v", h)
	}
	if c := cards[4]; !c.Health.Healthy || c.Telemetry.PowerW != 0 {
		t.Errorf("a card without power readings is healthy with 0 W: %+v", c)
	}
}

// A node without the NVIDIA library has no NVIDIA cards: that is absence,
// not failure. This uses the real go-nvml binding with a library path that
// does not exist.
func TestNVMLLibraryNotFoundIsAbsent(t *testing.T) {
	b := testNVIDIA(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")))
	_, err := b.Cards(context.Background())
	if !errors.Is(err, ErrAbsent) || !strings.Contains(err.Error(), "NVML library (libnvidia-ml.so.1) not found") {
		t.Fatalf("Cards = %v, want ErrAbsent", err)
	}
	if err := b.Watch(context.Background(), make(chan HealthEvent)); err != nil {
		t.Errorf("Watch without NVML = %v, want nil at once", err)
	}
	noDriver := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	if _, err := testNVIDIA(noDriver).Cards(context.Background()); !errors.Is(err, ErrAbsent) {
		t.Errorf("driver not loaded: %v, want ErrAbsent", err)
	}
	denied := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	if _, err := testNVIDIA(denied).Cards(context.Background()); err == nil || errors.Is(err, ErrAbsent) ||
		!errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Errorf("no permission: %v, want a failure wrapping ERROR_NO_PERMISSION", err)
	}
}

// watchNVML runs Watch in a goroutine and returns its events and a stop
// function that returns Watch's result.
func watchNVML(t *testing.T, b *NVIDIA) (<-chan HealthEvent, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan HealthEvent)
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, events) }()
	return events, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Watch did not return within 10s of cancel")
			return nil
		}
	}
}

func TestNVMLXidHealth(t *testing.T) {
	node := newMockNode(t, dgxh100.New())
	events, stop := watchNVML(t, testNVIDIA(node))

	// Events are handled in order: the application Xid 13 on card 2 comes
	// first, so if it were not ignored it would be the first event out.
	node.xid(2, 13)
	node.xid(3, 79)
	ev := recv(t, events)
	if ev.CardID != node.dev(3).UUID || ev.Health.Healthy || ev.Health.LastXid != 79 ||
		ev.Health.Reason != "critical Xid 79" || ev.Backend != "nvml" {
		t.Fatalf("first event = %+v, want card 3 unhealthy with Xid 79", ev)
	}
	for _, xid := range ApplicationXids() {
		node.xid(1, xid)
	}
	node.events <- nvml.EventData{Device: node.Devices[5], EventType: nvml.EventTypeDoubleBitEccError}
	if ev = recv(t, events); ev.CardID != node.dev(5).UUID || ev.Health.Reason != "double-bit ECC error" {
		t.Fatalf("event = %+v, want card 5 double-bit ECC (application Xids on card 1 ignored)", ev)
	}
	// Single-bit ECC and other event types change nothing.
	node.events <- nvml.EventData{Device: node.Devices[0], EventType: nvml.EventTypeSingleBitEccError}
	node.events <- nvml.EventData{Device: node.Devices[0], EventType: nvml.EventTypePState}
	// A critical Xid with no device concerns every card.
	node.events <- nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	for i := range 8 {
		ev := recv(t, events)
		if ev.CardID != node.dev(i).UUID || ev.Health.LastXid != 48 {
			t.Errorf("device-less Xid: event %d = %+v", i, ev)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Watch returned %v", err)
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	for i := range 8 {
		if m := node.registered[i]; m != nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError {
			t.Errorf("device %d registered mask %#x, want Xid|DBE", i, m)
		}
	}
}

func TestNVMLWatchFailureMarksAllUnhealthy(t *testing.T) {
	node := newMockNode(t, dgxh200.New())
	node.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_UNKNOWN },
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	node.dev(7).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	b := testNVIDIA(node)
	events := make(chan HealthEvent, 32)
	err := b.Watch(context.Background(), events)
	if !errors.Is(err, errNVMLWait) {
		t.Fatalf("Watch = %v, want errNVMLWait", err)
	}
	close(events)
	unhealthy := map[string]string{}
	for ev := range events {
		if ev.Health.Healthy {
			t.Errorf("healthy event %+v", ev)
		}
		unhealthy[ev.CardID] = ev.Health.Reason
	}
	if len(unhealthy) != 8 {
		t.Errorf("%d cards reported unhealthy, want all 8", len(unhealthy))
	}
	if r := unhealthy[node.dev(7).UUID]; !strings.Contains(r, "event wait") {
		t.Errorf("card 7's last reason = %q", r)
	}
}

// The Manager carries NVML health to its inventory and event stream.
func TestManagerWithNVML(t *testing.T) {
	node := newMockNode(t, dgxh100.New())
	sim := mustSim(t, "rtx4090-48g:2", "m")
	m, err := Open(context.Background(), Config{Backends: []Backend{testNVIDIA(node), sim}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n := len(m.Cards()); n != 10 {
		t.Fatalf("inventory has %d cards, want 10", n)
	}
	node.xid(2, 13)
	node.xid(3, 79)
	ev := recvManager(t, m)
	if ev.CardID != node.dev(3).UUID || ev.Backend != "nvml" || ev.Health.LastXid != 79 {
		t.Fatalf("event = %+v", ev)
	}
	for _, c := range m.Cards() {
		if c.Health.Healthy != (c.ID != node.dev(3).UUID) {
			t.Errorf("card %s (index %d) health %+v", c.ID, c.Index, c.Health)
		}
	}
	// A refresh lists the card as NVML reads it (healthy) but the Xid sticks.
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := findCard(m.Cards(), node.dev(3).UUID); c.Health.Healthy || c.Health.LastXid != 79 {
		t.Errorf("after refresh card 3 = %+v", c.Health)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNVIDIAReportsHardwareEvidence(t *testing.T) {
	node := newMockNode(t, dgxh100.New())
	cards, err := NewNVIDIA(node, DefaultCatalog()).Cards(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	serials := map[string]bool{}
	for i, c := range cards {
		e := c.Evidence
		if e == nil {
			t.Fatalf("card %d: no evidence", i)
		}
		if e.Serial == "" || serials[e.Serial] || e.BoardPartNumber != "692-2G520-0200-000" || e.PCIDeviceID != 0x233010de ||
			e.PCISubsystemID != 0x16c110de || e.MaxSMClockMHz != 1980 || e.MaxMemClockMHz != 2619 || e.DriverVersion == "" {
			t.Errorf("card %d evidence %+v", i, *e)
		}
		serials[e.Serial] = true
	}
}
