package startup

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
)

func program(stdout, stderr *bytes.Buffer, env map[string]string) Program {
	return Program{
		Name: "lpu-test", Version: "v1.2.3",
		Usage:  func(w io.Writer) { fmt.Fprint(w, "usage: lpu-test [flags]\n") },
		Stdout: stdout, Stderr: stderr,
		Getenv: func(k string) string { return env[k] },
	}
}

func TestParseError(t *testing.T) {
	bad := errors.New("flag provided but not defined: -x")
	tests := map[string]struct {
		err                    error
		wantErr                error
		wantStdout, wantStderr string
	}{
		"help":         {err: flag.ErrHelp, wantStdout: "usage: lpu-test [flags]\n"},
		"wrapped help": {err: fmt.Errorf("parse: %w", flag.ErrHelp), wantStdout: "usage: lpu-test [flags]\n"},
		"bad flag":     {err: bad, wantErr: bad, wantStderr: "usage: lpu-test [flags]\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := program(&out, &errOut, nil).ParseError(tc.err)
			if err != tc.wantErr {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if out.String() != tc.wantStdout || errOut.String() != tc.wantStderr {
				t.Fatalf("stdout %q stderr %q, want %q and %q", out.String(), errOut.String(), tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

func TestPrintVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := program(&out, &errOut, nil).PrintVersion(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "lpu-test v1.2.3\n" || errOut.Len() != 0 {
		t.Fatalf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("version: v1\nroot: /file-root\nlog:\n  level: debug\n  format: text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	applyErr := errors.New("config after flags: bad")
	tests := map[string]struct {
		file      string
		apply     func(*config.Config) error
		env       map[string]string
		wantRoot  string
		wantErr   string
		wantDebug bool     // the installed logger logs debug
		wantLog   []string // in stderr
	}{
		"defaults": {wantRoot: config.DefaultRoot},
		"file":     {file: file, wantRoot: "/file-root", wantDebug: true},
		"flags over file": {
			file: file, apply: func(c *config.Config) error { c.Root = "/flag-root"; return nil },
			wantRoot: "/flag-root", wantDebug: true,
		},
		"env log level with warning": {
			env:      map[string]string{"LPU_LOG_LEVEL": "loud"},
			wantRoot: config.DefaultRoot, wantLog: []string{"LPU_LOG_LEVEL", "loud"},
		},
		"missing file": {file: filepath.Join(dir, "nope.yaml"), wantErr: "nope.yaml"},
		"apply fails":  {apply: func(*config.Config) error { return applyErr }, wantErr: applyErr.Error()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			prev := slog.Default()
			defer slog.SetDefault(prev)
			var out, errOut bytes.Buffer
			cfg, log, err := program(&out, &errOut, tc.env).Config(tc.file, tc.apply)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if slog.Default() != prev {
					t.Fatal("default logger replaced although Config failed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Root != tc.wantRoot {
				t.Fatalf("root %q, want %q", cfg.Root, tc.wantRoot)
			}
			if slog.Default() != log {
				t.Fatal("the configured logger is not slog's default")
			}
			if got := log.Enabled(context.Background(), slog.LevelDebug); got != tc.wantDebug {
				t.Fatalf("debug enabled = %v, want %v", got, tc.wantDebug)
			}
			log.Info("probe-line")
			for _, want := range append(tc.wantLog, "probe-line") {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
				}
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}
