package tests_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/pelletier/go-toml/v2"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

// containerd17Version is the containerd 1.7 release test/e2e/tools.sh
// containerd17 builds from the Go module proxy.
const containerd17Version = "v1.7.35"

// syncProbe is an NRI plugin that only reports the runtime's Synchronize.
type syncProbe struct{ synced chan struct{} }

// RemovePodSandbox is a request handler; the stub wants at least one.
func (p *syncProbe) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

// Synchronize is the runtime's first call after registration.
func (p *syncProbe) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(p.synced)
	return nil, nil
}

// TestContainerd17Snippet runs a real containerd 1.7 with
// deploy/runtime/containerd-1.7.toml imported (its host paths moved under a
// temp dir, nothing else changed): the merged config has NRI on and CDI on
// with the chart's spec dir, and an NRI plugin named and indexed as lpu-nri
// registers on the snippet's socket and is synchronized. Skipped without
// the binary ($CONTAINERD17 or test/e2e/tools.sh containerd17) or root.
func TestContainerd17Snippet(t *testing.T) {
	bin := charttest.FirstExecutable(os.Getenv("CONTAINERD17"), "/var/cache/lpu-e2e/containerd-"+containerd17Version+"/containerd")
	if bin == "" {
		t.Skip("no containerd 1.7 ($CONTAINERD17 or test/e2e/tools.sh containerd17)")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	vals := loadChartValues(t)
	snippet, err := os.ReadFile("runtime/containerd-1.7.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := daemontest.ShortDir(t)
	moved := string(snippet)
	for from, to := range map[string]string{
		`socket_path = "` + vals.Config.NRI.Socket + `"`: `socket_path = "` + dir + `/nri.sock"`,
		`plugin_path = "/opt/nri/plugins"`:               `plugin_path = "` + dir + `/plugins"`,
		`plugin_config_path = "/etc/nri/conf.d"`:         `plugin_config_path = "` + dir + `/conf.d"`,
	} {
		if strings.Count(moved, from) != 1 {
			t.Fatalf("containerd-1.7.toml: want exactly one %s (the chart's path)", from)
		}
		moved = strings.Replace(moved, from, to, 1)
	}
	for _, f := range []struct{ name, body string }{
		{"lpu.toml", moved},
		{"config.toml", `version = 2
root = "` + dir + `/root"
state = "` + dir + `/state"
imports = ["` + dir + `/lpu.toml"]
[grpc]
  address = "` + dir + `/ctd.sock"
[ttrpc]
  address = "` + dir + `/ctd.sock.ttrpc"
`},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.toml")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	dump := exec.CommandContext(ctx, bin, "--config", cfg, "config", "dump")
	dump.Stdout, dump.Stderr = &stdout, &stderr
	if err := dump.Run(); err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, stderr.String())
	}
	var merged map[string]any
	if err := toml.Unmarshal(stdout.Bytes(), &merged); err != nil {
		t.Fatalf("parse config dump: %v", err)
	}
	cri, _ := digAny(merged, "plugins", "io.containerd.grpc.v1.cri").(map[string]any)
	nri, _ := digAny(merged, "plugins", "io.containerd.nri.v1.nri").(map[string]any)
	if nri["disable"] != false || nri["socket_path"] != dir+"/nri.sock" || cri["enable_cdi"] != true ||
		!slices.Contains(toStrings(cri["cdi_spec_dirs"]), vals.Config.CDI.SpecDir) {
		t.Errorf("merged: nri %v; cri enable_cdi %v cdi_spec_dirs %v", nri, cri["enable_cdi"], cri["cdi_spec_dirs"])
	}

	var logs bytes.Buffer
	ctd := exec.CommandContext(ctx, bin, "--config", cfg)
	ctd.Stdout, ctd.Stderr = &logs, &logs
	if err := ctd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ctd.Process.Kill()
		_ = ctd.Wait()
	})
	sock := filepath.Join(dir, "nri.sock")
	for i := 0; ; i++ {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if i == 300 {
			t.Fatalf("containerd 1.7 opened no NRI socket at %s in 30s:\n%s", sock, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := &syncProbe{synced: make(chan struct{})}
	s, err := stub.New(p, stub.WithPluginName(vals.Config.NRI.PluginName), stub.WithPluginIdx(vals.Config.NRI.PluginIndex),
		stub.WithSocketPath(sock))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("register with containerd 1.7: %v\n%s", err, logs.String())
	}
	defer s.Stop()
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatalf("containerd 1.7 did not synchronize plugin %s-%s:\n%s", vals.Config.NRI.PluginIndex, vals.Config.NRI.PluginName, logs.String())
	}
}
