package market_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// capture runs a small mesh through a job's life and returns every message
// it exchanged, for round-trip tests and fuzz seeds.
func capture(t testing.TB) []market.Message {
	h := markettest.New(markettest.Options{})
	for _, id := range []string{"coord", "a", "b"} {
		cfg := market.DefaultConfig(id)
		if id != "coord" {
			cfg.Cards = markettest.MustCards(id, "h100-sxm-80g:2")
		}
		h.MustAdd(cfg)
	}
	var msgs []market.Message
	h.OnReady = func(p *markettest.Peer, rd market.Ready) { msgs = append(msgs, rd.Messages...) }
	spec := market.JobSpec{ID: "j1", Cards: 4, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 2}, MaxPriceCNY: 30,
		Command: []string{"torchrun", "train.py"}, Env: map[string]string{"NCCL_DEBUG": "INFO"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	h.RunFor(time.Second)
	for i, k := range []markettest.AttemptKey{{Job: "j1", Share: 0, Epoch: 1}, {Job: "j1", Share: 1, Epoch: 1}} {
		for _, p := range h.Peers() {
			if p.Running[k] != nil && i == 0 {
				_ = h.Exit(p.ID, k, 0)
			} else if p.Running[k] != nil {
				_ = h.ExitWith(p.ID, k, 127, "did not start: executable file not found in $PATH: torchrun")
			}
		}
	}
	h.RunFor(time.Second)
	for _, id := range []string{"j2", "j3", "j4"} { // three jobs want the same four cards
		if err := h.SubmitAt("coord", market.JobSpec{ID: id, Cards: 2, MaxPriceCNY: 30, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	h.RunFor(time.Second)
	return msgs
}

func TestMessageRoundTrip(t *testing.T) {
	msgs := capture(t)
	types := map[string]bool{}
	for _, m := range msgs {
		b, err := market.EncodeMessage(m)
		if err != nil {
			t.Fatalf("encode %T: %v", m.Payload, err)
		}
		back, err := market.DecodeMessage(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, back)
		}
		types[m.Payload.Type()] = true
		if e, ok := m.Payload.(*market.AttemptEnded); ok && e.Reason != "" {
			types["attempt_ended with a reason"] = true
		}
	}
	for _, typ := range []string{"bid_request", "bid", "decline", "award", "accept", "release", "start", "renewal", "renewal_ack", "attempt_ended", "attempt_ended with a reason", "end_ack"} {
		if !types[typ] {
			t.Errorf("the captured run sent no %s message", typ)
		}
	}
}

func TestDecodeMessageRefusesBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      `{`,
		"unknown type":  `{"from":"a","to":"b","type":"gift","payload":{}}`,
		"unknown field": `{"from":"a","to":"b","type":"release","payload":{"job":"j1","lease":"L1","extra":1}}`,
		"no sender":     `{"from":"","to":"b","type":"release","payload":{"job":"j1","lease":"L1"}}`,
		"bad job id":    `{"from":"a","to":"b","type":"release","payload":{"job":"J 1","lease":"L1"}}`,
		"zero epoch":    `{"from":"a","to":"b","type":"renewal","payload":{"job":"j1","share":0,"epoch":0}}`,
		"negative use":  `{"from":"a","to":"b","type":"renewal","payload":{"job":"j1","share":0,"epoch":1,"card_seconds":-5}}`,
		"dup cards":     `{"from":"a","to":"b","type":"bid","payload":{"job":"j1","round":1,"lease":"L1","lease_for":"2s","cards":[{"id":"g0","model":"a100-80g","price_cny":1},{"id":"g0","model":"a100-80g","price_cny":1}]}}`,
		"min over want": `{"from":"a","to":"b","type":"bid_request","payload":{"job":"j1","round":1,"want":1,"min":2,"filter":{"max_price_cny":3}}}`,
		"trailing":      `{"from":"a","to":"b","type":"release","payload":{"job":"j1","lease":"L1"}} {}`,
		"bad cause":     `{"from":"a","to":"b","type":"attempt_ended","payload":{"job":"j1","share":0,"epoch":1,"cause":"bored"}}`,
		"long reason": `{"from":"a","to":"b","type":"attempt_ended","payload":{"job":"j1","share":0,"epoch":1,"cause":"exited","reason":"` +
			strings.Repeat("x", market.MaxEndReasonBytes+1) + `"}}`,
		"bad outputs": `{"from":"a","to":"b","type":"attempt_ended","payload":{"job":"j1","share":0,"epoch":1,"cause":"exited","outputs":"sha256:../../etc"}}`,
	} {
		if _, err := market.DecodeMessage([]byte(in)); !errors.Is(err, market.ErrBadMessage) {
			t.Errorf("%s: err = %v, want ErrBadMessage", name, err)
		}
	}
}

// FuzzMessage decodes arbitrary bytes as a message and steps whatever
// decodes into a coordinator and a supplier that hold a running job. No
// input may panic; a decoded message must survive a round trip; and
// nothing the nodes send in response may be malformed.
func FuzzMessage(f *testing.F) {
	for _, m := range capture(f) {
		b, err := market.EncodeMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := market.DecodeMessage(data)
		if err != nil {
			if !errors.Is(err, market.ErrBadMessage) {
				t.Fatalf("decode error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		b, err := market.EncodeMessage(m)
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		again, err := market.DecodeMessage(b)
		if err != nil {
			t.Fatalf("a re-encoded message does not decode: %v\n%s", err, b)
		}
		if b2, _ := market.EncodeMessage(again); !bytes.Equal(b, b2) {
			t.Fatalf("round trip is not stable:\n%s\n%s", b, b2)
		}
		h := markettest.New(markettest.Options{})
		for _, id := range []string{"coord", "a"} {
			cfg := market.DefaultConfig(id)
			if id == "a" {
				cfg.Cards = markettest.MustCards(id, "h100-sxm-80g:2")
			}
			h.MustAdd(cfg)
		}
		h.OnReady = func(p *markettest.Peer, rd market.Ready) {
			for _, out := range rd.Messages {
				b, err := market.EncodeMessage(out)
				if err == nil {
					_, err = market.DecodeMessage(b)
				}
				if err != nil {
					t.Fatalf("%s sent a malformed %s: %v", p.ID, out.Payload.Type(), err)
				}
			}
		}
		if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 2, MaxPriceCNY: 30, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		h.RunFor(50 * time.Millisecond)
		for _, id := range []string{"coord", "a"} {
			err := h.Step(id, market.MessageReceived{Now: h.Now, Message: m})
			if errors.Is(err, market.ErrBadMessage) {
				t.Fatalf("Step refused what DecodeMessage accepted: %v", err)
			}
		}
		h.RunFor(3 * time.Second)
		if len(h.Violations) > 0 {
			t.Fatal(strings.Join(h.Violations, "\n"))
		}
	})
}
