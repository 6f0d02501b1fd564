package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/node"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// kubeconfig points at a port nobody serves: the API server is down.
func kubeconfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func params(t *testing.T) (Params, string) {
	dir := daemontest.ShortDir(t)
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(dir, "s")
	cfg.CDI.SpecDir = filepath.Join(dir, "c")
	cfg.Kubelet.DevicePluginDir = filepath.Join(dir, "dp")
	if err := os.MkdirAll(cfg.Kubelet.DevicePluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := &Options{NodeName: "node-a", Kubeconfig: kubeconfig(t),
		PluginDir: filepath.Join(dir, "p"), RegistryDir: filepath.Join(dir, "r")}
	simulate(t, cfg, 8)
	return Params{Config: cfg, Options: opts, Version: "test"}, dir
}

// simulate writes a simulated node of n LPUs under the state dir, as
// lpu-nri simulate does in the chart's init container, and makes it the
// root.
func simulate(t *testing.T, cfg *config.Config, n int) {
	t.Helper()
	cfg.Root = filepath.Join(cfg.StateDir, "simulated-node")
	if err := devicesim.WriteNode(cfg.Root, n, ""); err != nil {
		t.Fatal(err)
	}
}

// With the API server down the driver still starts, registers with the
// kubelet (its registration socket answers) and stops cleanly.
func TestRunWithAPIServerDown(t *testing.T) {
	p, _ := params(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, p) }()
	reg := node.DRARegistrationSocket(p.Options.RegistryDir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", reg); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("registration socket never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := node.RefuseIfDRA(p.Options.RegistryDir); err == nil {
		t.Fatal("the device plugin guard does not see the running driver")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunRefusesNextToTheDevicePlugin(t *testing.T) {
	p, _ := params(t)
	ln, err := net.Listen("unix", filepath.Join(p.Config.Kubelet.DevicePluginDir, "lpu.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Run(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "lpu-device-plugin serves this node") {
		t.Fatalf("Run = %v", err)
	}
}

// A config naming a kubelet root that does not exist fails the start on
// one line naming the field and the value.
func TestRunRefusesAMissingKubeletRoot(t *testing.T) {
	p, dir := params(t)
	p.Config.Kubelet.RootDir = filepath.Join(dir, "no-kubelet")
	err := Run(context.Background(), p)
	if want := `kubelet.rootDir: "` + p.Config.Kubelet.RootDir + `" does not exist`; err == nil || err.Error() != want {
		t.Fatalf("Run = %v, want %q", err, want)
	}
}

// Without --plugin-dir and --registry-dir the driver registers under the
// config's kubelet.rootDir.
func TestRunRegistersUnderTheKubeletRoot(t *testing.T) {
	p, dir := params(t)
	p.Config.Kubelet.RootDir = filepath.Join(dir, "k")
	if err := os.MkdirAll(p.Config.Kubelet.RootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.Options.PluginDir, p.Options.RegistryDir = "", ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, p) }()
	reg := node.DRARegistrationSocket(filepath.Join(p.Config.Kubelet.RootDir, "plugins_registry"))
	deadline := time.Now().Add(10 * time.Second)
	for !serving(reg) {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered", reg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(p.Config.Kubelet.RootDir, "plugins", "lpu.hyperaccel.ai")); err != nil {
		t.Errorf("plugin dir: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func serving(path string) bool {
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
	}
	return err == nil
}
