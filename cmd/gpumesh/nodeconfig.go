package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/spf13/pflag"
)

// The configuration file of `gpumesh node` is TOML with one top-level key
// per flag, named as the flag without its dashes:
//
//	data = "/var/lib/gpumesh"
//	join = ["/ip4/203.0.113.7/tcp/4747/p2p/12D3KooW..."]
//	max-job-memory = "16GiB"
//	mdns = false
//
// The keys are the flag set's own names (configKeys), so a new flag is a
// new key with nothing else to change. A flag given on the command line
// overrides the file. A key that is no flag, a value of the wrong TOML
// type, and a value the flag refuses are refused with the file, line and
// key, before anything starts.

// systemConfigFile is where a node's configuration lives on a machine that
// runs it as a service (the packages install it there).
const systemConfigFile = "/etc/gpumesh/node.toml"

// Flags of `gpumesh node` that are about the file itself, not keys in it.
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
)

// notKeys are the flags that have no key in the file.
var notKeys = map[string]bool{flagConfig: true, flagPrintConfig: true, "help": true, "force": true, "json": true, "probe-timeout": true}

// pathKeys are the keys naming files or directories: relative values in a
// file are relative to the file's directory, not to where the node was
// started.
var pathKeys = map[string]bool{"data": true, "secret-file": true, "api-token-file": true, "owner-tokens": true}

// configKeys are the keys a node configuration file may hold: the flags
// of fl less notKeys, sorted.
func configKeys(fl *pflag.FlagSet) []string {
	var keys []string
	fl.VisitAll(func(f *pflag.Flag) {
		if !notKeys[f.Name] {
			keys = append(keys, f.Name)
		}
	})
	sort.Strings(keys)
	return keys
}

// configSource says where the node's configuration file is: the path and
// whether the user named it (--config); a default that does not exist is
// no file at all.
func configSource(flag string, e env) (path string, explicit bool) {
	if flag != "" {
		return flag, true
	}
	if e.systemConfig != "" {
		if _, err := os.Stat(e.systemConfig); err == nil {
			return e.systemConfig, false
		}
	}
	return userConfigFile(e), false
}

// userConfigFile is $XDG_CONFIG_HOME/gpumesh/node.toml, else
// ~/.config/gpumesh/node.toml ("" without a home directory).
func userConfigFile(e env) string {
	if d := e.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "gpumesh", "node.toml")
	}
	if h := e.getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "gpumesh", "node.toml")
	}
	return ""
}

// defaultConfigFile is where `gpumesh node init` writes without --config:
// the system file for root on Unix, the user's file otherwise.
func defaultConfigFile(e env) string {
	if e.systemConfig != "" && e.euid() == 0 {
		return e.systemConfig
	}
	return userConfigFile(e)
}

// configEntry is one key = value of a configuration file.
type configEntry struct {
	key   string
	line  int
	value any // as go-toml decodes it: string, int64, float64, bool, []any, map, time
}

// configError is a bad configuration file: the file, the line (0: the
// whole file), the key ("" where no key is at fault) and why.
type configError struct {
	file string
	line int
	key  string
	why  string
}

func (e *configError) Error() string {
	where := e.file
	if e.line > 0 {
		where = fmt.Sprintf("%s:%d", e.file, e.line)
	}
	if e.key == "" {
		return where + ": " + e.why
	}
	return fmt.Sprintf("%s: key %q: %s", where, e.key, e.why)
}

// parseConfig reads TOML data from file into its top-level entries, in
// the order they appear. Tables are refused: every key is top-level.
func parseConfig(file string, data []byte) ([]configEntry, error) {
	var values map[string]any
	if err := toml.Unmarshal(data, &values); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, &configError{file: file, line: row, why: "not TOML: " + de.Error()}
		}
		return nil, &configError{file: file, why: "not TOML: " + err.Error()}
	}
	var (
		p   unstable.Parser
		out []configEntry
	)
	p.Reset(data)
	for p.NextExpression() {
		expr := p.Expression()
		switch expr.Kind {
		case unstable.KeyValue:
			var parts []string
			for it := expr.Key(); it.Next(); {
				parts = append(parts, string(it.Node().Data))
			}
			key := strings.Join(parts, ".")
			line := p.Shape(expr.Raw).Start.Line
			if len(parts) > 1 {
				return nil, &configError{file: file, line: line, key: key, why: "dotted keys are not used: every key is a flag of gpumesh node, at the top level"}
			}
			out = append(out, configEntry{key: key, line: line, value: values[key]})
		case unstable.Table, unstable.ArrayTable:
			var parts []string
			line := 0
			for it := expr.Key(); it.Next(); {
				parts = append(parts, string(it.Node().Data))
				if line == 0 {
					line = lineOf(&p, it.Node().Data)
				}
			}
			return nil, &configError{file: file, line: line, key: strings.Join(parts, "."),
				why: "tables are not used: every key is a flag of gpumesh node, at the top level, before any [table]"}
		}
	}
	if err := p.Error(); err != nil { // toml.Unmarshal accepted it, so this is unexpected
		return nil, &configError{file: file, why: "not TOML: " + err.Error()}
	}
	return out, nil
}

// lineOf is the line where b, a slice of the parser's input, starts; 0
// when b is not one (a quoted key with escapes is decoded into a copy).
func lineOf(p *unstable.Parser, b []byte) (line int) {
	defer func() {
		if recover() != nil {
			line = 0
		}
	}()
	return p.Shape(p.Range(b)).Start.Line
}

// loadConfig reads the configuration file at path.
func loadConfig(path string) ([]configEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &configError{file: path, why: "cannot read it: " + errors.Unwrap(err).Error()}
	}
	return parseConfig(path, data)
}

// applyConfig sets the flags of fl that the command line left unset from
// the entries of file. It returns the line of every key it set. Every
// entry is checked before any flag is set: on error fl is as it was.
func applyConfig(fl *pflag.FlagSet, file string, entries []configEntry) (map[string]int, error) {
	type set struct {
		name   string
		values []string
	}
	var sets []set
	seen := map[string]int{}
	for _, en := range entries {
		bad := func(format string, args ...any) error {
			return &configError{file: file, line: en.line, key: en.key, why: fmt.Sprintf(format, args...)}
		}
		f := fl.Lookup(en.key)
		if f == nil || notKeys[en.key] {
			hint := ""
			if s := closestKeys(en.key, configKeys(fl)); len(s) > 0 {
				hint = " (did you mean " + strings.Join(s, " or ") + "?)"
			}
			return nil, bad("no such key%s; the keys are the flags of `gpumesh node --help`", hint)
		}
		if prev, dup := seen[en.key]; dup {
			return nil, bad("set again (first on line %d)", prev)
		}
		seen[en.key] = en.line
		values, err := flagValues(f, en.value)
		if err != nil {
			return nil, bad("%v", err)
		}
		if pathKeys[en.key] {
			for i, v := range values {
				if v != "" && !filepath.IsAbs(v) && !strings.HasPrefix(v, "~") {
					values[i] = filepath.Join(filepath.Dir(file), v)
				}
			}
		}
		if err := checkFlagValues(f, values); err != nil {
			return nil, bad("%v", err)
		}
		if !f.Changed {
			sets = append(sets, set{en.key, values})
		}
	}
	lines := map[string]int{}
	for _, s := range sets {
		if len(s.values) == 0 { // an empty list: the flag's default (none)
			lines[s.name] = seen[s.name]
			continue
		}
		for _, v := range s.values {
			if err := fl.Set(s.name, v); err != nil { // checked above
				return nil, &configError{file: file, line: seen[s.name], key: s.name, why: err.Error()}
			}
		}
		lines[s.name] = seen[s.name]
	}
	return lines, nil
}

// flagValues turns a TOML value into the strings flag f is set with (one
// per element for a repeatable flag), refusing a value of the wrong type.
func flagValues(f *pflag.Flag, v any) ([]string, error) {
	switch f.Value.Type() {
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want true or false, got %s", tomlKind(v))
		}
		return []string{strconv.FormatBool(b)}, nil
	case "int":
		n, ok := v.(int64)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return nil, fmt.Errorf("want an integer, got %s", tomlKind(v))
		}
		return []string{strconv.FormatInt(n, 10)}, nil
	case "duration":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a duration as a string, such as \"30s\" or \"8h\", got %s", tomlKind(v))
		}
		return []string{s}, nil
	case "stringArray":
		switch v := v.(type) {
		case string:
			return []string{v}, nil
		case []any:
			out := make([]string, 0, len(v))
			for i, x := range v {
				s, ok := x.(string)
				if !ok {
					return nil, fmt.Errorf("want a list of strings, got %s at index %d", tomlKind(x), i)
				}
				out = append(out, s)
			}
			return out, nil
		}
		return nil, fmt.Errorf("want a list of strings, got %s", tomlKind(v))
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("want a string, got %s", tomlKind(v))
	}
	return []string{s}, nil
}

// checkFlagValues sets a copy of flag f's value with values, so that a
// value the flag refuses is found before any flag changes.
func checkFlagValues(f *pflag.Flag, values []string) error {
	scratch := pflag.NewFlagSet("check", pflag.ContinueOnError)
	scratch.SetOutput(discard{})
	fresh := freshValue(f)
	if fresh == nil {
		return nil // fl.Set will say
	}
	probe := *f
	probe.Value = fresh
	scratch.AddFlag(&probe)
	for _, v := range values {
		if err := scratch.Set(f.Name, v); err != nil {
			return fmt.Errorf("%q: %v", v, unwrapSetError(err))
		}
	}
	return nil
}

// freshValue is a new value of flag f's kind, for checkFlagValues: the
// types gpumesh node's flags use, else nil.
func freshValue(f *pflag.Flag) pflag.Value {
	fs := pflag.NewFlagSet("fresh", pflag.ContinueOnError)
	switch f.Value.Type() {
	case "bool":
		return newFlagValue(fs, func() { fs.Bool("x", false, "") })
	case "int":
		return newFlagValue(fs, func() { fs.Int("x", 0, "") })
	case "duration":
		return newFlagValue(fs, func() { fs.Duration("x", 0, "") })
	case "stringArray":
		return newFlagValue(fs, func() { fs.StringArray("x", nil, "") })
	case "string":
		return newFlagValue(fs, func() { fs.String("x", "", "") })
	}
	switch f.Value.(type) {
	case *logFormat:
		v := logFormat("text")
		return &v
	case *logLevel:
		v := logLevel(0)
		return &v
	}
	return nil
}

func newFlagValue(fs *pflag.FlagSet, define func()) pflag.Value {
	define()
	return fs.Lookup("x").Value
}

// unwrapSetError drops pflag's "invalid argument" wrapping, which names
// the flag as the command line would have it.
func unwrapSetError(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// tomlKind names a decoded TOML value's type for a message.
func tomlKind(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	case time.Time, toml.LocalDate, toml.LocalDateTime, toml.LocalTime:
		return "a date or time"
	}
	return fmt.Sprintf("%T", v)
}

// closestKeys are the keys within an edit distance of 2 of key.
func closestKeys(key string, keys []string) []string {
	var out []string
	for _, k := range keys {
		if editDistance(key, k) <= 2 || strings.ReplaceAll(key, "_", "-") == k {
			out = append(out, k)
		}
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// configOrigin tells, for an error of the node's flag checks (which name
// the flag as "--name …"), which key of the file gave that flag its value,
// so that the error can name the file and line too.
func configOrigin(err error, file string, lines map[string]int) error {
	var ue usageError
	if file == "" || !errors.As(err, &ue) {
		return err
	}
	msg := ue.Error()
	for key, line := range lines {
		rest, ok := strings.CutPrefix(msg, "--"+key)
		if ok && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
			why := strings.TrimLeft(rest, ": ")
			return usageError{&configError{file: file, line: line, key: key, why: why}}
		}
	}
	return err
}

// printConfig writes the effective configuration of fl as TOML: every key
// with its value, whether it came from the defaults, the file or the
// command line.
func printConfig(fl *pflag.FlagSet) string {
	var b strings.Builder
	for _, key := range configKeys(fl) {
		fmt.Fprintf(&b, "%s = %s\n", key, tomlValue(fl.Lookup(key)))
	}
	return b.String()
}

// tomlValue is flag f's current value as a TOML value.
func tomlValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool", "int":
		return f.Value.String()
	case "stringArray":
		list := f.Value.(pflag.SliceValue).GetSlice()
		quoted := make([]string, len(list))
		for i, s := range list {
			quoted[i] = tomlString(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	return tomlString(f.Value.String())
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	b, err := toml.Marshal(map[string]string{"v": s})
	if err != nil { // a string always marshals
		return strconv.Quote(s)
	}
	_, v, _ := strings.Cut(strings.TrimSpace(string(b)), " = ")
	return v
}

// euidFunc is os.Geteuid, where the platform has one.
func euidFunc() func() int {
	if runtime.GOOS == "windows" {
		return func() int { return -1 }
	}
	return os.Geteuid
}
