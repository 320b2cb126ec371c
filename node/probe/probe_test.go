package probe

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// scaled is a coordinator whose work is the real one scaled down 3350
// times (an H100 is 1 GB/s), so that the CPU computes it in milliseconds;
// every ratio between models is the catalog's.
func scaled(cat *device.Catalog) Config {
	return Config{Target: 50 * time.Millisecond, Deadline: 2 * time.Second, Setup: -1, Words: 1 << 12, Blocks: 64, Catalog: cat,
		Bandwidth: func(model string) float64 {
			if m, ok := cat.Lookup(model); ok {
				return m.BandwidthGBs / 3350
			}
			return 0
		}}
}

func card(t *testing.T, id, model string) device.Card {
	t.Helper()
	return device.Card{ID: id, UUID: id, Model: model, Vendor: device.VendorNVIDIA, MemoryMiB: 81920, Backend: "hw"}
}

// virtualClock is the fake's clock in these tests: it stands still while
// the CPU computes the digests, and a card's wait moves it on. Cards run
// side by side, so the answer takes as long as the longest wait. With it
// a verdict does not depend on how fast (or how loaded) the machine that
// runs the test is.
type virtualClock struct {
	mu      sync.Mutex
	base    time.Time
	longest time.Duration
}

func (c *virtualClock) now() time.Time { return c.base }

func (c *virtualClock) sleep(_ context.Context, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.longest = max(c.longest, d)
}

// run probes cards on the fake and judges the answer as the coordinator
// would, with the time it took on the fake's virtual clock.
func run(t *testing.T, cfg Config, f *Fake, cards []device.Card) (Answer, []string) {
	t.Helper()
	clock := &virtualClock{base: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	f.Now, f.Sleep = clock.now, clock.sleep
	models := map[string]uint64{}
	for _, c := range cards {
		models[c.Model] = c.MemoryMiB
	}
	ch, _, err := cfg.NewChallenge(models)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ch)
	got, err := DecodeChallenge(raw)
	if err != nil {
		t.Fatal(err)
	}
	a := Answer{Nonce: got.Nonce, Cards: f.Run(context.Background(), got, cards), Backend: f.Name()}
	raw, _ = json.Marshal(a)
	a, err = DecodeAnswer(raw, ch)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range cfg.Judge(ch, a, clock.longest, 0) {
		s := v.Model + ": "
		switch {
		case v.Refused:
			s += "refused: " + v.Detail
		case v.PerformsAs != "":
			s += "performs as " + v.PerformsAs
		default:
			s += "passed"
		}
		out = append(out, s)
	}
	return a, out
}

func TestAnHonestCardPasses(t *testing.T) {
	cfg := scaled(device.DefaultCatalog())
	_, v := run(t, cfg, &Fake{DefaultGBs: 1}, []device.Card{card(t, "GPU-a", "h100-sxm-80g"), card(t, "GPU-b", "h100-sxm-80g")})
	if len(v) != 1 || v[0] != "h100-sxm-80g: passed" {
		t.Fatalf("verdicts %v", v)
	}
}

func TestAForgedAnswerIsRefused(t *testing.T) {
	cfg := scaled(device.DefaultCatalog())
	_, v := run(t, cfg, &Fake{DefaultGBs: 1, Forge: true}, []device.Card{card(t, "GPU-a", "h100-sxm-80g")})
	if len(v) != 1 || !strings.Contains(v[0], "refused: card GPU-a: block") || !strings.Contains(v[0], "digest is wrong") {
		t.Fatalf("verdicts %v", v)
	}
}

func TestALateAnswerIsRefused(t *testing.T) {
	cfg := scaled(device.DefaultCatalog())
	cfg.Deadline = 30 * time.Millisecond
	_, v := run(t, cfg, &Fake{DefaultGBs: 1}, []device.Card{card(t, "GPU-a", "h100-sxm-80g")}) // takes 50 ms
	if len(v) != 1 || !strings.Contains(v[0], "past the 30ms deadline") {
		t.Fatalf("verdicts %v", v)
	}
}

func TestACardTenTimesSlowerIsTreatedAsTheSlowerModel(t *testing.T) {
	// A catalog with the Tesla T4 (320 GB/s), a tenth of an H100's 3350.
	cat, err := device.ParseCatalog(catalogWithT4(t))
	if err != nil {
		t.Fatal(err)
	}
	_, v := run(t, scaled(cat), &Fake{DefaultGBs: 0.1}, []device.Card{card(t, "GPU-a", "h100-sxm-80g")})
	if len(v) != 1 || v[0] != "h100-sxm-80g: performs as t4-16g" {
		t.Fatalf("verdicts %v", v)
	}
	// An H100 claimed by what performs like an RTX 4090 (1008 GB/s).
	_, v = run(t, scaled(device.DefaultCatalog()), &Fake{DefaultGBs: 1008.0 / 3350}, []device.Card{card(t, "GPU-a", "h100-sxm-80g")})
	if len(v) != 1 || v[0] != "h100-sxm-80g: performs as rtx4090-24g" {
		t.Fatalf("verdicts %v", v)
	}
	// With the published catalog, nothing of NVIDIA's is ten times slower
	// than an H100: refused.
	_, v = run(t, scaled(device.DefaultCatalog()), &Fake{DefaultGBs: 0.1}, []device.Card{card(t, "GPU-a", "h100-sxm-80g")})
	if len(v) != 1 || !strings.Contains(v[0], "refused") || !strings.Contains(v[0], "slower than any model of its vendor") {
		t.Fatalf("verdicts %v", v)
	}
}

func catalogWithT4(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("key,vendor,name_pattern,memory_gib,bf16_tflops,bandwidth_gbs,list_cny_per_card_hour,confidence\n")
	for _, m := range device.DefaultCatalog().Models() {
		if m.Key == "h100-sxm-80g" || m.Key == "rtx4090-24g" {
			b.WriteString(strings.Join([]string{m.Key, string(m.Vendor), m.NamePattern, itoa(m.MemoryGiB), "300", ftoa(m.BandwidthGBs), "", "test"}, ",") + "\n")
		}
	}
	b.WriteString("t4-16g,nvidia,Tesla T4,16,65,320,,test\n")
	return b.String()
}

func TestAnAnswerOfTheWrongSizeIsRefused(t *testing.T) {
	cfg := scaled(device.DefaultCatalog())
	ch, _, err := cfg.NewChallenge(map[string]uint64{"h100-sxm-80g": 81920})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]Answer{
		"short":         {Nonce: ch.Nonce, Cards: []CardAnswer{{Card: "GPU-a", Model: "h100-sxm-80g", Digests: make([]uint64, ch.Blocks-1)}}},
		"another nonce": {Cards: []CardAnswer{{Card: "GPU-a", Model: "h100-sxm-80g", Digests: make([]uint64, ch.Blocks)}}},
		"unasked model": {Nonce: ch.Nonce, Cards: []CardAnswer{{Card: "GPU-a", Model: "a100-80g", Digests: make([]uint64, ch.Blocks)}}},
		"index twice": {Nonce: ch.Nonce, Cards: []CardAnswer{{Card: "a", Model: "h100-sxm-80g", Digests: make([]uint64, ch.Blocks)},
			{Card: "b", Model: "h100-sxm-80g", Digests: make([]uint64, ch.Blocks)}}},
	} {
		raw, _ := json.Marshal(a)
		if _, err := DecodeAnswer(raw, ch); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeAnswer([]byte("{"), ch); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage: %v", err)
	}
}

func TestTheReferenceIsTheWorkItClaims(t *testing.T) {
	// Two nonces give different digests; one block depends on the round
	// count; the same inputs give the same digest.
	w := Work{Words: 1 << 10, Rounds: 8}
	a, b := Seed([32]byte{1}, 0), Seed([32]byte{2}, 0)
	if Block(a, w, 4, 1) == Block(b, w, 4, 1) || Block(a, w, 4, 1) == Block(a, Work{Words: 1 << 10, Rounds: 9}, 4, 1) {
		t.Fatal("digests do not depend on the nonce and the work")
	}
	if Block(a, w, 4, 3) != Digests(a, w, 4)[3] {
		t.Fatal("a block computed alone differs from the whole")
	}
	if Seed([32]byte{1}, 0) == Seed([32]byte{1}, 1) {
		t.Fatal("cards share a seed")
	}
}

func itoa(v uint64) string  { return strconvFormat(float64(v), 0) }
func ftoa(v float64) string { return strconvFormat(v, 1) }
func strconvFormat(v float64, prec int) string {
	return strings.TrimSuffix(strings.TrimSuffix(fmtFloat(v, prec), ".0"), ".")
}

func fmtFloat(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
