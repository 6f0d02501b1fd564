package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// cordoned follows the Node with a kubeconfig, serves the monitor as it
// is without API access (outside a cluster, no kubeconfig) or without a
// node name, and refuses a kubeconfig that does not load.
func TestCordonedSource(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster
	discard := slog.New(slog.DiscardHandler)
	mon := health.New(device.NewSysfs(t.TempDir()), health.Options{})
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	w, src, err := cordoned(mon, kc, "node-1", discard)
	if _, ok := src.(*plugin.CordonSource); err != nil || w == nil || !ok {
		t.Errorf("with a kubeconfig: watcher %v source %T err %v, want a CordonSource", w, src, err)
	}
	for name, args := range map[string][2]string{"no kubeconfig, not in a cluster": {"", "node-1"}, "no node name": {kc, ""}} {
		w, src, err := cordoned(mon, args[0], args[1], discard)
		if err != nil || w != nil || src != plugin.Source(mon) {
			t.Errorf("%s: watcher %v source %T err %v, want the monitor itself", name, w, src, err)
		}
	}
	if _, _, err := cordoned(mon, filepath.Join(t.TempDir(), "missing"), "node-1", discard); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("a missing kubeconfig: %v", err)
	}
}
