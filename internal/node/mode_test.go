package node

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

func TestRegistryDir(t *testing.T) {
	if got := RegistryDir("/var/lib/kubelet/device-plugins/"); got != "/var/lib/kubelet/plugins_registry" {
		t.Fatalf("RegistryDir = %s", got)
	}
}

func TestRefuse(t *testing.T) {
	dir := daemontest.ShortDir(t)
	reg := DRARegistrationSocket(dir)
	dp := filepath.Join(dir, "lpu.sock")
	// Nothing there, then a stale file: both fine.
	if err := RefuseIfDRA(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{reg, dp} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RefuseIfDRA(dir); err != nil {
		t.Fatalf("stale file: %v", err)
	}
	if err := RefuseIfDevicePlugin(dp); err != nil {
		t.Fatalf("stale file: %v", err)
	}
	os.Remove(reg)
	os.Remove(dp)
	for _, p := range []string{reg, dp} {
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	if err := RefuseIfDRA(dir); err == nil || !strings.Contains(err.Error(), "lpu-dra serves this node ("+reg+" answers)") {
		t.Fatalf("RefuseIfDRA = %v", err)
	}
	if err := RefuseIfDevicePlugin(dp); err == nil || !strings.Contains(err.Error(), "lpu-device-plugin serves this node") {
		t.Fatalf("RefuseIfDevicePlugin = %v", err)
	}
}

// lpu-dra in rolling-update mode registers as <driver>-<pod UID>-reg.sock:
// the device plugin still sees it.
func TestRefuseRollingUpdateSocket(t *testing.T) {
	dir := daemontest.ShortDir(t)
	p := filepath.Join(dir, inject.Driver+"-5d2c9a40-1e7b-4c3f-8a96-0f4e2b7d1c58-reg.sock")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RefuseIfDRA(dir); err != nil {
		t.Fatalf("stale rolling-update socket: %v", err)
	}
	os.Remove(p)
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := RefuseIfDRA(dir); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("RefuseIfDRA with a rolling-update socket = %v", err)
	}
}
