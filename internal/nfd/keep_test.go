package nfd

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

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
