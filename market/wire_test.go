package market_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/wireschema"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// testdata/wire/vN/ holds what wire version N of market messages is:
// schema.txt, every field of every message (WireSchema), and messages/,
// one message of each type as version N's builds wrote it. Every later
// build must decode every version's messages; the current version must
// have the schema it had and write its messages byte for byte. A change
// of a message (a field added, renamed, retyped or removed) fails here
// until market.WireVersion is raised and the new version's files written:
//
//	go test ./market/ -run TestWireGolden -update
//
// Older peers refuse a newer version's messages (they refuse unknown
// fields), and say so in their status (node: newer peers).
var updateGolden = flag.Bool("update", false, "write the golden files of the current wire version")

func TestWireGolden(t *testing.T) {
	cur := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", market.WireVersion))
	if *updateGolden {
		writeGolden(t, cur)
	}
	for v := 1; v <= market.WireVersion; v++ {
		dir := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", v))
		files, err := filepath.Glob(filepath.Join(dir, "messages", "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("wire version %d has no golden messages in %s (%v)", v, dir, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := market.DecodeMessage(b)
			if err != nil {
				t.Errorf("this build cannot read %s (wire version %d): %v", f, v, err)
				continue
			}
			if typ := strings.TrimSuffix(filepath.Base(f), ".json"); m.Payload.Type() != typ {
				t.Errorf("%s reads as a %s", f, m.Payload.Type())
			}
			if v != market.WireVersion {
				continue
			}
			again, err := market.EncodeMessage(m)
			if err != nil || string(again) != strings.TrimSpace(string(b)) {
				t.Errorf("%s: the wire form changed (%v):\n was %s\n now %s\nolder peers may not read it: raise market.WireVersion and write testdata/wire/v%d (-update)",
					filepath.Base(f), err, strings.TrimSpace(string(b)), again, market.WireVersion+1)
			}
		}
	}
	// Every type of the current version has its golden message.
	for _, line := range strings.Split(market.WireSchema(), "\n") {
		typ, _, _ := strings.Cut(line, ".")
		if typ == "" || typ == "(message)" {
			continue
		}
		if _, err := os.Stat(filepath.Join(cur, "messages", typ+".json")); err != nil {
			t.Errorf("no golden %s message for wire version %d: %v", typ, market.WireVersion, err)
		}
	}
	want, err := os.ReadFile(filepath.Join(cur, "schema.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := market.WireSchema(); got != string(want) {
		t.Errorf("the market messages' fields changed since wire version %d was written:\n%s\nolder peers refuse messages with fields they do not know: raise market.WireVersion and write testdata/wire/v%d (-update)",
			market.WireVersion, wireschema.Diff(string(want), got), market.WireVersion+1)
	}
}

// writeGolden writes the current version's schema and one message of each
// type that a small mesh's run sends.
func writeGolden(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "messages"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schema.txt"), []byte(market.WireSchema()), 0o644); err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	for _, m := range append(capture(t), captureProbe(t)...) {
		typ := m.Payload.Type()
		if done[typ] {
			continue
		}
		done[typ] = true
		b, err := market.EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "messages", typ+".json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// captureProbe runs a coordinator that requires verification (market
// VerifyNew) through a job's first round and returns the messages it sent,
// a probe request among them (the run of capture sends none).
func captureProbe(t testing.TB) []market.Message {
	t.Helper()
	h := markettest.New(markettest.Options{})
	cfg := market.DefaultConfig("coord")
	cfg.Verify = market.VerifyNew
	h.MustAdd(cfg)
	s := market.DefaultConfig("a")
	s.Cards = markettest.MustCards("a", "h100-sxm-80g:1")
	h.MustAdd(s)
	var msgs []market.Message
	h.OnReady = func(p *markettest.Peer, rd market.Ready) { msgs = append(msgs, rd.Messages...) }
	h.RunFor(100 * time.Millisecond)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"train"}}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(time.Second)
	return msgs
}

// A message of a newer version is refused as newer, not as malformed, even
// with fields this build does not know; an explicit version this build
// reads is fine.
func TestNewerWireVersionIsNamed(t *testing.T) {
	newer := fmt.Sprintf(`{"v":%d,"from":"a","to":"b","type":"release","payload":{"job":"j1","lease":"L1","priority":3}}`, market.WireVersion+1)
	_, err := market.DecodeMessage([]byte(newer))
	var nv *market.NewerVersionError
	if !errors.As(err, &nv) || nv.Version != market.WireVersion+1 || !errors.Is(err, market.ErrBadMessage) {
		t.Fatalf("a version %d message: %v", market.WireVersion+1, err)
	}
	if !strings.Contains(err.Error(), "the sender runs a newer gpumesh") {
		t.Errorf("error %q", err)
	}
	same := fmt.Sprintf(`{"v":%d,"from":"a","to":"b","type":"release","payload":{"job":"j1","lease":"L1"}}`, market.WireVersion)
	if _, err := market.DecodeMessage([]byte(same)); err != nil {
		t.Errorf("a message naming this version: %v", err)
	}
}
