// Package probe is the timed verification probe: a coordinator's proof
// that a supplier's cards are the cards it claims, or at least as fast.
//
// The coordinator sends a Challenge: a fresh random nonce and, for each
// claimed model, the work each card must do — a buffer of Words 64-bit
// words filled from the nonce, then Rounds rounds in which every word is
// mixed with another of its block (a permutation the nonce picks each
// round), then the XOR of each of Blocks blocks. The work is memory-bound:
// each round reads every word twice and writes it once, so a card's time
// bounds its memory bandwidth; the work is sized so that a card as fast as
// its catalog figure takes about Target. The answer — each block's digest
// — depends on the nonce and on every word of the block, so it cannot be
// computed ahead of time or without doing the work, and the coordinator
// checks it by computing a few blocks it picks at random after the answer
// came (on its CPU: one block is 1/Blocks of the work). From the time the
// answer took the coordinator bounds each card's bandwidth from below and
// decides: passed, performs like a slower model (treated as it), or
// refused (a wrong digest, a late or malformed answer, or slower than any
// model of its vendor).
//
// What it does not prove: compute (the kernel is memory-bound), that the
// card stays the same card after the probe, or that results of later jobs
// are honest. The NVIDIA backend runs the kernels through the CUDA driver
// API loaded at run time (cuda_linux.go); Fake runs them on the CPU and
// sleeps for the time a card of a given bandwidth would take, for tests.
package probe

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Message kinds on direct streams.
const (
	KindChallenge = "probe.challenge"
	KindAnswer    = "probe.answer"
)

// Limits of the protocol.
const (
	// MaxModels and MaxCards bound a challenge's models and an answer's
	// cards.
	MaxModels = 16
	MaxCards  = 64
	// MaxBlocks bounds the digests of one card.
	MaxBlocks = 4096
	// MaxWords bounds a card's buffer (8 GiB), MaxRounds its rounds.
	MaxWords  = 1 << 30
	MaxRounds = 1 << 20
	// MaxMessageBytes bounds an encoded challenge or answer.
	MaxMessageBytes = 2 << 20
)

// Work is what each card of one model must do.
type Work struct {
	// Words is the buffer's length in 64-bit words, a power of two, a
	// multiple of Blocks; Rounds the mixing rounds.
	Words  uint64 `json:"words"`
	Rounds uint32 `json:"rounds"`
}

// Bytes is the memory traffic of the work: each round reads every word
// twice and writes it once.
func (w Work) Bytes() float64 { return 24 * float64(w.Words) * float64(w.Rounds) }

// Challenge is what the coordinator sends.
type Challenge struct {
	Nonce [32]byte `json:"nonce"`
	// Blocks is the digests each card answers with, a power of two.
	Blocks int `json:"blocks"`
	// Work is the work per card, by model key.
	Work map[string]Work `json:"work"`
}

// CardAnswer is one card's answer.
type CardAnswer struct {
	// Card is the card's ID on its node (its UUID where it has one), Index
	// its position in the challenge's seed (see Seed).
	Card  string `json:"card"`
	Model string `json:"model"`
	Index int    `json:"index"`
	// Digests are the XOR of each block after the last round.
	Digests []uint64 `json:"digests,omitempty"`
	// Err says why the card was not probed (busy, the backend failed).
	Err string `json:"err,omitempty"`
	// Unprobed says the node has no probe for the card (its vendor's, or
	// no CUDA driver): it may be judged by its evidence alone.
	Unprobed bool `json:"unprobed,omitempty"`
}

// Answer is what the supplier sends back.
type Answer struct {
	Nonce [32]byte     `json:"nonce"`
	Cards []CardAnswer `json:"cards"`
	// Backend names what ran the probe ("cuda", "fake").
	Backend string `json:"backend"`
}

// ErrMalformed wraps every decoding and checking error.
var ErrMalformed = errors.New("malformed probe message")

// Check checks a challenge's fields.
func (c *Challenge) Check() error {
	if c.Blocks < 1 || c.Blocks > MaxBlocks || bits.OnesCount(uint(c.Blocks)) != 1 {
		return fmt.Errorf("%w: %d blocks: want a power of two up to %d", ErrMalformed, c.Blocks, MaxBlocks)
	}
	if len(c.Work) == 0 || len(c.Work) > MaxModels {
		return fmt.Errorf("%w: %d models: want 1 to %d", ErrMalformed, len(c.Work), MaxModels)
	}
	for m, w := range c.Work {
		switch {
		case m == "" || len(m) > 64:
			return fmt.Errorf("%w: model %q", ErrMalformed, m)
		case w.Words < uint64(c.Blocks)*2 || w.Words > MaxWords || bits.OnesCount64(w.Words) != 1:
			return fmt.Errorf("%w: %s: %d words: want a power of two from %d to %d", ErrMalformed, m, w.Words, 2*c.Blocks, MaxWords)
		case w.Rounds < 1 || w.Rounds > MaxRounds:
			return fmt.Errorf("%w: %s: %d rounds: want 1 to %d", ErrMalformed, m, w.Rounds, MaxRounds)
		}
	}
	return nil
}

// DecodeChallenge reads and checks a challenge.
func DecodeChallenge(b []byte) (Challenge, error) {
	var c Challenge
	if len(b) > MaxMessageBytes {
		return c, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Challenge{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return c, c.Check()
}

// DecodeAnswer reads an answer and checks it against the challenge it
// answers: the nonce, at most MaxCards cards of the challenge's models,
// each with exactly Blocks digests unless it says why it has none.
func DecodeAnswer(b []byte, ch Challenge) (Answer, error) {
	var a Answer
	if len(b) > MaxMessageBytes {
		return a, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxMessageBytes)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return Answer{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if a.Nonce != ch.Nonce {
		return Answer{}, fmt.Errorf("%w: it answers another challenge", ErrMalformed)
	}
	if len(a.Cards) > MaxCards {
		return Answer{}, fmt.Errorf("%w: %d cards, at most %d", ErrMalformed, len(a.Cards), MaxCards)
	}
	seen := map[int]bool{}
	for _, c := range a.Cards {
		if _, ok := ch.Work[c.Model]; !ok {
			return Answer{}, fmt.Errorf("%w: card %q of model %q, which was not asked", ErrMalformed, c.Card, c.Model)
		}
		if c.Index < 0 || c.Index >= MaxCards || seen[c.Index] || len(c.Card) > 128 || len(c.Err) > 512 {
			return Answer{}, fmt.Errorf("%w: card %q: index %d", ErrMalformed, c.Card, c.Index)
		}
		seen[c.Index] = true
		if c.Err == "" && len(c.Digests) != ch.Blocks {
			return Answer{}, fmt.Errorf("%w: card %q: %d digests, want %d", ErrMalformed, c.Card, len(c.Digests), ch.Blocks)
		}
	}
	return a, nil
}

// Seed is the seed of card index's buffer under nonce.
func Seed(nonce [32]byte, index int) uint64 {
	var b [36]byte
	copy(b[:], nonce[:])
	binary.LittleEndian.PutUint32(b[32:], uint32(index))
	sum := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(sum[:8])
}

// Mix is SplitMix64's finalizer, the kernels' mixing function.
func Mix(x uint64) uint64 {
	z := x + 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// RoundParams are round r's partner offset within a block (1 to
// blockWords-1) and its constant.
func RoundParams(seed uint64, r uint32, blockWords uint64) (m, c uint64) {
	m = 1 + Mix(seed^(uint64(r+1)<<40))%(blockWords-1)
	c = Mix(seed + uint64(r))
	return m, c
}

// Block computes block b's digest on the CPU, as the kernels do on the
// card: the reference both sides agree on. It costs Words/Blocks × Rounds
// mixes.
func Block(seed uint64, w Work, blocks int, b int) uint64 {
	bw := w.Words / uint64(blocks)
	base := uint64(b) * bw
	in := make([]uint64, bw)
	out := make([]uint64, bw)
	for k := range in {
		in[k] = Mix(seed ^ (base + uint64(k)))
	}
	mask := bw - 1
	for r := range w.Rounds {
		m, c := RoundParams(seed, r, bw)
		for k := uint64(0); k < bw; k++ {
			// Global indices i = base+k and j = (i &^ mask) | ((i ^ m) & mask):
			// within the block, k ^ m.
			v := in[(k^m)&mask]
			out[k] = Mix(in[k] ^ bits.RotateLeft64(v, 17) ^ c)
		}
		in, out = out, in
	}
	var d uint64
	for _, v := range in {
		d ^= v
	}
	return d
}

// Digests computes every block's digest on the CPU (Fake does).
func Digests(seed uint64, w Work, blocks int) []uint64 {
	out := make([]uint64, blocks)
	for b := range out {
		out[b] = Block(seed, w, blocks, b)
	}
	return out
}

// Size returns the work that takes a card of bandwidth gbs (GB/s) about
// target: a buffer of words (a power of two) and the rounds that fill the
// time. words is capped by the card's memory (a quarter of it, for two
// buffers and room to spare).
func Size(gbs float64, target time.Duration, words uint64, memMiB uint64) Work {
	for words > 1024 && words*8*2 > memMiB<<20/2 {
		words /= 2
	}
	rounds := gbs * 1e9 * target.Seconds() / (24 * float64(words))
	return Work{Words: words, Rounds: uint32(min(max(rounds, 1), MaxRounds))}
}
