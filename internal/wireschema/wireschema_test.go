package wireschema

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	Model string `json:"model"`
}

type sample struct {
	ID      string            `json:"id"`
	Cards   []inner           `json:"cards"`
	Env     map[string]string `json:"env,omitempty"`
	At      time.Time         `json:"at"`
	Data    []byte            `json:"data"`
	Nonce   [4]byte           `json:"nonce"`
	Next    *sample           `json:"next,omitempty"`
	skipped int
	Gone    int `json:"-"`
	inner
}

func TestOf(t *testing.T) {
	got := strings.Join(Of("s", sample{}), "\n")
	want := strings.Join([]string{
		"s.at time.Time",
		"s.cards[].model string",
		"s.data bytes",
		"s.env?{string} string",
		"s.id string",
		"s.model string",
		"s.next? wireschema.sample (recursive)",
		"s.nonce[] uint8", // encoding/json writes an array of numbers, not base64
	}, "\n")
	if got != want {
		t.Errorf("schema:\n%s\nwant:\n%s", got, want)
	}
	if d := Diff("a x\nb y\n", "a x\nc z\n"); d != "  + c z\n  - b y" {
		t.Errorf("diff %q", d)
	}
}
