package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/ownerkey"
)

// policyFlags are the flags of `gpumesh node` that say which jobs the
// supplier serves, and the owner tokens its API takes.
type policyFlags struct {
	allow        []string
	deny         []string
	maxDuration  time.Duration
	network      string
	maxMemory    string // a size, "auto" or "0"
	maxPids      int
	maxCPUWeight int
	ownerTokens  string
	// autoMemory is what --max-job-memory auto comes to; nil:
	// node.AutoJobMemory (tests give another).
	autoMemory func() (int64, error)
}

// autoJobMemory is --max-job-memory's default (see node.AutoJobMemory).
const autoJobMemory = "auto"

// defaultJobNetwork is --job-network's default: jobs may reach the public
// internet, never the supplier's own network (gang jobs across nodes meet
// on their private network).
const defaultJobNetwork = market.NetworkEgress

// policy turns the flags into the supplier's policy; a bad value is a
// usage error naming the flag. It logs the resource caps in effect.
func (f policyFlags) policy(log *slog.Logger) (market.Policy, error) {
	var p market.Policy
	for _, list := range []struct {
		flag string
		in   []string
		out  *[]string
	}{{"--allow-owner", f.allow, &p.AllowOwners}, {"--deny-owner", f.deny, &p.DenyOwners}} {
		for _, v := range list.in {
			for _, s := range strings.Split(v, ",") {
				id, err := owner.ParseID(strings.TrimSpace(s))
				if err != nil {
					return p, usagef("%s: %v (`gpumesh key show` prints an owner's ID)", list.flag, err)
				}
				*list.out = append(*list.out, string(id))
			}
		}
	}
	if f.maxDuration < 0 {
		return p, usagef("--max-job-duration: must not be negative, got %v", f.maxDuration)
	}
	p.MaxDuration = f.maxDuration
	n, err := market.ParseJobNetwork(f.network)
	if err != nil {
		return p, usagef("--job-network: %v", err)
	}
	p.MaxNetwork = n
	if p.MaxMemoryBytes, err = f.jobMemory(log); err != nil {
		return p, err
	}
	switch {
	case f.maxPids < 0 || (f.maxPids > 0 && f.maxPids < market.MinJobPids):
		return p, usagef("--max-job-pids: want 0 (no cap) or at least %d, got %d", market.MinJobPids, f.maxPids)
	case f.maxCPUWeight < 0 || f.maxCPUWeight > market.MaxJobCPUWeight:
		return p, usagef("--max-job-cpu-weight: want 0 (no cap) or 1 to %d, got %d", market.MaxJobCPUWeight, f.maxCPUWeight)
	}
	p.MaxPids, p.MaxCPUWeight = f.maxPids, f.maxCPUWeight
	return p, nil
}

// jobMemory reads --max-job-memory: a size, auto, or 0 for no cap. Where
// auto cannot be worked out it is no cap, with a warning.
func (f policyFlags) jobMemory(log *slog.Logger) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(f.maxMemory), autoJobMemory) {
		auto := f.autoMemory
		if auto == nil {
			auto = node.AutoJobMemory
		}
		b, err := auto()
		if err != nil {
			log.Warn("--max-job-memory auto: no memory cap on jobs", "err", err)
			return 0, nil
		}
		return b, nil
	}
	b, err := parseBytes(f.maxMemory)
	switch {
	case err != nil:
		return 0, usagef("--max-job-memory: %v, auto or 0", err)
	case b != 0 && b < market.MinJobMemoryBytes:
		return 0, usagef("--max-job-memory: %s is below the least a job may have, 8MiB (0: no cap)", f.maxMemory)
	}
	return b, nil
}

// tokenLine is one owner token of an --owner-tokens file.
type tokenLine struct {
	line    int
	token   string
	keyFile string
}

// parseOwnerTokens reads an --owner-tokens file: one "TOKEN KEY_FILE" a
// line, blank lines and lines starting with # ignored. A token is 16 or more
// printable characters without spaces; no token appears twice.
func parseOwnerTokens(data []byte) ([]tokenLine, error) {
	var out []tokenLine
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want TOKEN KEY_FILE, got %d fields", n, len(fields))
		}
		token, file := fields[0], fields[1]
		if len(token) < 16 {
			return nil, fmt.Errorf("line %d: the token has %d characters; want at least 16", n, len(token))
		}
		if strings.ContainsFunc(token, func(r rune) bool { return r < '!' || r > '~' }) {
			return nil, fmt.Errorf("line %d: the token holds a character outside printable ASCII", n)
		}
		if prev, dup := seen[token]; dup {
			return nil, fmt.Errorf("line %d: the token of line %d again", n, prev)
		}
		seen[token] = n
		out = append(out, tokenLine{line: n, token: token, keyFile: file})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no tokens in it")
	}
	return out, nil
}

// loadOwnerTokens reads an --owner-tokens file and the keys it names
// (relative to the file's directory). The file holds secrets: like a key, it
// must not be readable by others.
func loadOwnerTokens(path string) (map[string]owner.Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o): chmod 600 it", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines, err := parseOwnerTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]owner.Key, len(lines))
	for _, l := range lines {
		file := l.keyFile
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(path), file)
		}
		k, err := ownerkey.Load(file)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, l.line, err)
		}
		out[l.token] = k
	}
	return out, nil
}
