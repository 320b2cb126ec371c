package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// logFlags are the logging flags of a command that logs (`gpumesh node`):
//
//	--log-format text|json   (default text)
//	--log-level debug|info|warn|error   (default info)
//
// A bad value fails flag parsing, so the command exits with status 2 before
// doing anything. Use:
//
//	lf := addLogFlags(cmd.Flags())
//	... RunE: logger := lf.logger(e.stderr)
//
// and pass logger down; attach IDs as attributes (logger.With("job", id),
// "peer", id), never inside the message.
type logFlags struct {
	format logFormat
	level  logLevel
}

// addLogFlags registers --log-format and --log-level on fs.
func addLogFlags(fs *pflag.FlagSet) *logFlags {
	lf := &logFlags{format: "text", level: logLevel(slog.LevelInfo)}
	fs.Var(&lf.format, "log-format", "log record format: text or json")
	fs.Var(&lf.level, "log-level", "least severe level logged: debug, info, warn or error")
	return lf
}

// logger returns a structured logger writing records to w in the chosen
// format, at the chosen level and above.
func (lf *logFlags) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(lf.level)}
	if lf.format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logFormat is the value of --log-format.
type logFormat string

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "text|json" }

func (f *logFormat) Set(s string) error {
	switch v := strings.ToLower(s); v {
	case "text", "json":
		*f = logFormat(v)
		return nil
	}
	return fmt.Errorf("want text or json")
}

// logLevel is the value of --log-level.
type logLevel slog.Level

var logLevelNames = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

func (l *logLevel) String() string { return strings.ToLower(slog.Level(*l).String()) }
func (l *logLevel) Type() string   { return "level" }

func (l *logLevel) Set(s string) error {
	v, ok := logLevelNames[strings.ToLower(s)]
	if !ok {
		return fmt.Errorf("want debug, info, warn or error")
	}
	*l = logLevel(v)
	return nil
}
