package config

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// Environment variables that override the log section of the file.
const (
	EnvLogLevel  = "LPU_LOG_LEVEL"
	EnvLogFormat = "LPU_LOG_FORMAT"
)

// NewLogger builds the daemon's logger writing to w. Precedence for level
// and format: env (LPU_LOG_LEVEL, LPU_LOG_FORMAT, read through getenv; nil
// means no env) over the file's log section over the defaults (info, json).
// Values are case-insensitive. An invalid value never fails: it is skipped
// in favour of the next source and described in the returned warnings,
// which the caller logs with the new logger.
func NewLogger(l Log, w io.Writer, getenv func(string) string) (*slog.Logger, []string) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var warnings []string
	pick := func(field, env string, file, def string, allowed []string) string {
		if v := strings.ToLower(strings.TrimSpace(getenv(env))); v != "" {
			if slices.Contains(allowed, v) {
				return v
			}
			warnings = append(warnings, fmt.Sprintf("%s=%q is not one of %s; ignored", env, getenv(env), strings.Join(allowed, ", ")))
		}
		if v := strings.ToLower(strings.TrimSpace(file)); v != "" {
			if slices.Contains(allowed, v) {
				return v
			}
			warnings = append(warnings, fmt.Sprintf("%s %q is not one of %s; using %q", field, file, strings.Join(allowed, ", "), def))
		}
		return def
	}
	level := pick("log.level", EnvLogLevel, l.Level, DefaultLogLevel, AllowedLogLevels)
	format := pick("log.format", EnvLogFormat, l.Format, DefaultLogFormat, AllowedLogFormats)

	opts := &slog.HandlerOptions{Level: ParseLevel(level)}
	var h slog.Handler
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h), warnings
}

// ParseLevel maps an allowed level name to its slog level; unknown names
// map to info.
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "error":
		return slog.LevelError
	case "warn":
		return slog.LevelWarn
	case "debug":
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
