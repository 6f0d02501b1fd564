package device_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// FuzzDeviceAttributes writes arbitrary content into the attribute files of
// one device and checks what discovery makes of it: it never fails for one
// device's garbage; the device is healthy exactly when dev parses and status
// is READY or BUSY (after trimming, within the read bound); an unhealthy
// device has a reason; a major the tree's /proc/devices does not register
// to the lpu driver (only DefaultMajor is) is unhealthy; nothing reported
// names the discovery root; telemetry either parses into sane ranges or
// errors naming the host path.
func FuzzDeviceAttributes(f *testing.F) {
	f.Add("509:0\n", "READY\n", "0\n", "37.5\n", "42000\n")
	f.Add("509:0", " BUSY ", "-1", "100", "-273150")
	f.Add("", "", "", "", "")
	f.Add("1:2:3", "ready", "x", "NaN", "1e3")
	f.Add("4096:0", "READY\x00", "65536", "-0", "99999999999999999999")
	root := devicetest.NewTree(f, devicetest.Row{Index: 0})
	dir := filepath.Join(root, device.ClassDir, "lpu0")
	s := device.NewSysfs(root, device.WithLogger(quiet))
	f.Fuzz(func(t *testing.T, dev, status, numa, util, temp string) {
		for name, v := range map[string]string{
			"dev": dev, "status": status, "numa_node": numa,
			device.AttrUtilization: util, device.AttrTemperature: temp,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inv, err := s.Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover failed on one device's attributes: %v", err)
		}
		d := inv.Devices[0]
		major, minor, devErr := device.ParseDev(strings.TrimSpace(dev))
		st := strings.TrimSpace(status)
		// Major 0 is the kernel's unnamed-device major, which no driver
		// registers in /proc/devices; the health of such a node is the
		// /proc/devices check's (its own tests), not this invariant's.
		if devErr == nil && major == 0 {
			return
		}
		want := devErr == nil && major == device.DefaultMajor && len(dev) <= device.MaxAttrBytes && len(status) <= device.MaxAttrBytes &&
			(st == device.StatusReady || st == device.StatusBusy)
		if d.Health.Healthy != want {
			t.Fatalf("healthy = %v, want %v (dev %q status %q): %q", d.Health.Healthy, want, dev, status, d.Health.Reason)
		}
		if !d.Health.Healthy && d.Health.Reason == "" {
			t.Fatal("unhealthy without a reason")
		}
		if want && (d.Major != major || d.Minor != minor) {
			t.Fatalf("dev %q gave %d:%d, want %d:%d", dev, d.Major, d.Minor, major, minor)
		}
		if d.NUMANode < -1 || d.NUMANode > 1<<16-1 {
			t.Fatalf("numa_node %q gave %d", numa, d.NUMANode)
		}
		if h := s.ProbeHealth("lpu0"); h != d.Health {
			t.Fatalf("ProbeHealth %+v differs from Discover %+v", h, d.Health)
		}
		tm, err := s.Telemetry("lpu0")
		if err != nil {
			if !strings.Contains(err.Error(), "/sys/class/lpu/lpu0/") || strings.Contains(err.Error(), root) {
				t.Fatalf("telemetry error %q does not name the host path", err)
			}
		} else if !(tm.UtilizationPercent >= 0 && tm.UtilizationPercent <= 100) || tm.TemperatureCelsius < -273.15 {
			t.Fatalf("telemetry out of range: %+v", tm)
		}
		if strings.Contains(d.Health.Reason, root) || strings.Contains(d.Path, root) {
			t.Fatalf("root leaked: %+v", d)
		}
	})
}
