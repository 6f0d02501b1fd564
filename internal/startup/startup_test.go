package startup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
)

func program(stdout, stderr *bytes.Buffer, env map[string]string) Program {
	return Program{
		Name: "lpu-test", Version: "v1.2.3",
		Help:   func(w io.Writer) { fmt.Fprint(w, "usage: lpu-test [flags]\n") },
		Stdout: stdout, Stderr: stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}
}

// command declares the shared flags a daemon would.
func command(f *Flags) *cmdline.Command {
	c := cmdline.New("")
	f.Declare(c, "config", "root", "state-dir", "kubelet-dir", "metrics-addr", "version")
	return c
}

// run is one Start: what it returned and what it wrote.
type run struct {
	s           *Started
	err         error
	out, errOut *bytes.Buffer
}

func start(t *testing.T, args []string, env map[string]string) run {
	t.Helper()
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	var out, errOut bytes.Buffer
	var f Flags
	s, err := program(&out, &errOut, env).Start(args, &f, command(&f))
	return run{s, err, &out, &errOut}
}

func TestStartHelpVersionAndBadFlags(t *testing.T) {
	tests := map[string]struct {
		args       []string
		wantErr    string
		wantStdout string
	}{
		"help":      {args: []string{"--help"}, wantStdout: "usage: lpu-test [flags]\n"},
		"short -h":  {args: []string{"-h"}, wantStdout: "usage: lpu-test [flags]\n"},
		"version":   {args: []string{"--version"}, wantStdout: "lpu-test v1.2.3\n"},
		"bad flag":  {args: []string{"--bogus"}, wantErr: "unknown flag --bogus; see --help"},
		"bad value": {args: []string{"--version=maybe"}, wantErr: `--version: parse error; see --help`},
		"relative":  {args: []string{"--root", "x"}, wantErr: `--root "x": want an absolute path; see --help`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := start(t, tc.args, nil)
			s, err, out, errOut := r.s, r.err, r.out, r.errOut
			if s != nil {
				t.Fatalf("Start returned something to run for %v", tc.args)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line with %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.wantStdout || errOut.Len() != 0 {
				t.Fatalf("stdout %q stderr %q, want %q and nothing", out.String(), errOut.String(), tc.wantStdout)
			}
		})
	}
}

// TestStartEarlyLogFormat: an error before the config is loaded is logged
// in the format LPU_LOG_FORMAT names.
func TestStartEarlyLogFormat(t *testing.T) {
	for format, want := range map[string]string{"text": "level=ERROR msg=exiting", "json": `"level":"ERROR","msg":"exiting"`} {
		t.Run(format, func(t *testing.T) {
			r := start(t, []string{"--bogus"}, map[string]string{"LPU_LOG_FORMAT": format})
			LogError(r.err)
			errOut := r.errOut
			if got := strings.Count(errOut.String(), "\n"); got != 1 || !strings.Contains(errOut.String(), want) {
				t.Fatalf("stderr (%d lines) %q, want one line with %q", got, errOut.String(), want)
			}
		})
	}
}

func TestLogErrorOnePerLine(t *testing.T) {
	prev := slog.Default()
	defer slog.SetDefault(prev)
	var b bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&b, nil)))
	LogError(fmt.Errorf("config x: %w", errors.Join(errors.New("root: bad"), errors.New("stateDir: bad"))))
	if got := strings.Count(b.String(), "level=ERROR"); got != 2 {
		t.Fatalf("%d records, want 2:\n%s", got, b.String())
	}
}

func TestStartConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("version: v1\nroot: /file-root\nlog:\n  level: debug\n  format: text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args      []string
		env       map[string]string
		wantRoot  string
		wantErr   string
		wantDebug bool     // the installed logger logs debug
		wantLog   []string // in stderr
	}{
		"defaults":        {wantRoot: config.DefaultRoot},
		"file":            {args: []string{"--config", file}, wantRoot: "/file-root", wantDebug: true},
		"flags over file": {args: []string{"--config", file, "--root", "/flag-root"}, wantRoot: "/flag-root", wantDebug: true},
		"env over file":   {args: []string{"--config", file}, env: map[string]string{"LPU_ROOT": "/env-root"}, wantRoot: "/env-root", wantDebug: true},
		"env log level with warning": {
			env:      map[string]string{"LPU_LOG_LEVEL": "loud"},
			wantRoot: config.DefaultRoot, wantLog: []string{"LPU_LOG_LEVEL", "loud"},
		},
		"missing file": {args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "nope.yaml"},
		"apply fails":  {args: []string{"--metrics-addr", "nohost"}, wantErr: "config after flags"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := start(t, tc.args, tc.env)
			s, err, out, errOut := r.s, r.err, r.out, r.errOut
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Config.Root != tc.wantRoot {
				t.Fatalf("root %q, want %q", s.Config.Root, tc.wantRoot)
			}
			if slog.Default() != s.Log {
				t.Fatal("the configured logger is not slog's default")
			}
			if got := s.Log.Enabled(context.Background(), slog.LevelDebug); got != tc.wantDebug {
				t.Fatalf("debug enabled = %v, want %v", got, tc.wantDebug)
			}
			s.Log.Info("probe-line")
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

func TestDeclareUnknownPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for an unknown shared flag")
		}
	}()
	var f Flags
	f.Declare(cmdline.New(""), "no-such-flag")
}
