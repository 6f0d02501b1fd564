package nfd

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

func TestFlag(t *testing.T) {
	present := filepath.Join(t.TempDir(), "features.d", "lpu")
	if err := os.MkdirAll(filepath.Dir(present), 0o755); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(t.TempDir(), "no-nfd", "lpu")
	tests := map[string]struct {
		args      []string
		env       map[string]string
		simulated bool
		want      string // "<root>" stands for the root
	}{
		"default, NFD absent":         {want: ""},
		"default, simulated":          {simulated: true, want: "<root>" + DefaultPath},
		"given":                       {args: []string{"--nfd-features-file", absent}, want: absent},
		"given, simulated":            {args: []string{"--nfd-features-file", absent}, simulated: true, want: absent},
		"given empty disables":        {args: []string{"--nfd-features-file="}, simulated: true, want: ""},
		"env twin":                    {env: map[string]string{"LPU_NFD_FEATURES_FILE": present}, want: present},
		"env twin empty disables too": {env: map[string]string{"LPU_NFD_FEATURES_FILE": ""}, simulated: true, want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var f Flag
			c := cmdline.New("")
			f.Declare(c)
			if _, err := cmdline.Parse(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, c); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			var logs bytes.Buffer
			got := f.Path(tc.simulated, root, slog.New(slog.NewTextHandler(&logs, nil)))
			if want := strings.Replace(tc.want, "<root>", root, 1); got != want {
				t.Fatalf("Path = %q, want %q", got, want)
			}
			// The default is /etc/...; on a machine with NFD it exists.
			if _, err := os.Stat(filepath.Dir(DefaultPath)); name == "default, NFD absent" && err != nil && !strings.Contains(logs.String(), "NFD not installed") {
				t.Errorf("no log line for the skipped file: %q", logs.String())
			}
		})
	}
}

// TestKeep: the file follows the inventory (a firmware update on one card
// makes it "mixed") and Keep ends with its context.
func TestKeep(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0}, devicetest.Row{Index: 1})
	mon := health.New(device.NewSysfs(root), health.Options{ResyncInterval: 20 * time.Millisecond})
	path := filepath.Join(t.TempDir(), "features.d", "lpu")
	ctx, cancel := context.WithCancel(context.Background())
	monDone, keepDone := make(chan error, 1), make(chan error, 1)
	go func() { monDone <- mon.Run(ctx) }()
	go func() { keepDone <- Keep(ctx, mon, path, "hyperaccel.ai/lpu", slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		for _, ch := range []chan error{monDone, keepDone} {
			if err := <-ch; err != nil {
				t.Error(err)
			}
		}
	}()
	waitFor := func(line string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, _ := os.ReadFile(path)
			if strings.HasPrefix(string(b), "# +expiry-time=") && strings.Contains(string(b), line+"\n") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("file %q never held %q", b, line)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("hyperaccel.ai/lpu.firmware=" + devicetest.Firmware)
	devicetest.WriteAttr(t, root, "lpu1", "firmware_version", "2.0.0\n")
	waitFor("hyperaccel.ai/lpu.firmware=mixed")
}
