package startup

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestDeclareNFD(t *testing.T) {
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
		"default, simulated":          {simulated: true, want: "<root>" + nfd.DefaultPath},
		"given":                       {args: []string{"--nfd-features-file", absent}, want: absent},
		"given, simulated":            {args: []string{"--nfd-features-file", absent}, simulated: true, want: absent},
		"given empty disables":        {args: []string{"--nfd-features-file="}, simulated: true, want: ""},
		"env twin":                    {env: map[string]string{"LPU_NFD_FEATURES_FILE": present}, want: present},
		"env twin empty disables too": {env: map[string]string{"LPU_NFD_FEATURES_FILE": ""}, simulated: true, want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var f nfd.Flag
			c := cmdline.New("")
			DeclareNFD(c, &f)
			if _, err := cmdline.Parse(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, c); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if tc.simulated {
				// the marker lpu-nri simulate writes is what makes the root a simulation
				if err := os.WriteFile(filepath.Join(root, device.TreeMarker), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			got := f.Path(root, slog.New(slog.NewTextHandler(&logs, nil)))
			want := strings.Replace(tc.want, "<root>", root, 1)
			if _, err := os.Stat(filepath.Dir(nfd.DefaultPath)); name == "default, NFD absent" && err == nil {
				want = nfd.DefaultPath // this machine has NFD's directory (an e2e run may make it)
			}
			if got != want {
				t.Fatalf("Path = %q, want %q", got, want)
			}
			// The default is /etc/...; on a machine with NFD it exists.
			if _, err := os.Stat(filepath.Dir(nfd.DefaultPath)); name == "default, NFD absent" && err != nil && !strings.Contains(logs.String(), "NFD not installed") {
				t.Errorf("no log line for the skipped file: %q", logs.String())
			}
		})
	}
}
