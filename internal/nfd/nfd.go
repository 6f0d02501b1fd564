package nfd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// DefaultPath is where Node Feature Discovery's local source reads
// feature files on the host.
const DefaultPath = "/etc/kubernetes/node-feature-discovery/features.d/lpu"

// maxValue is the longest Kubernetes label value.
const maxValue = 63

// Lifetime is how long NFD keeps the labels of a feature file after it was
// written (its "# +expiry-time" directive); Refresh is how often a running
// writer (the device plugin or lpu-dra) rewrites the file, well inside
// Lifetime. A node whose writer is gone (uninstalled, crashed for good)
// loses the labels within an hour instead of advertising LPUs forever.
const (
	Lifetime = time.Hour
	Refresh  = Lifetime / 4
)

// Expiring returns lines headed by NFD's expiry directive for until (UTC,
// RFC 3339, whole seconds); no lines stay none, so Write removes the file.
func Expiring(lines []string, until time.Time) []string {
	if len(lines) == 0 {
		return nil
	}
	return append([]string{"# +expiry-time=" + until.UTC().Truncate(time.Second).Format(time.RFC3339)}, lines...)
}

// Features returns the feature lines for an inventory, one "name=value" per
// line, names prefixed with the resource name:
//
//	hyperaccel.ai/lpu.present=true
//	hyperaccel.ai/lpu.count=8
//	hyperaccel.ai/lpu.rings=1
//	hyperaccel.ai/lpu.largest-ring=8
//	hyperaccel.ai/lpu.driver-version=2.1.0-sim
//	hyperaccel.ai/lpu.model=HyperAccel-LPU-sim
//	hyperaccel.ai/lpu.firmware=1.8.2-sim
//
// Only facts that change with hardware or software are listed (not health),
// so the labels do not churn. Values are made valid label values; model and
// firmware are "mixed" when devices disagree; unknown values are left out.
func Features(resource string, inv *device.Inventory) []string {
	if inv == nil || len(inv.Devices) == 0 {
		return nil
	}
	largest := 0
	for _, r := range inv.Rings {
		largest = max(largest, len(r))
	}
	lines := []string{
		resource + ".present=true",
		resource + ".count=" + strconv.Itoa(len(inv.Devices)),
		resource + ".rings=" + strconv.Itoa(len(inv.Rings)),
		resource + ".largest-ring=" + strconv.Itoa(largest),
	}
	if v := LabelValue(inv.DriverVersion); v != "" {
		lines = append(lines, resource+".driver-version="+v)
	}
	if v := LabelValue(shared(inv.Devices, func(d device.Device) string { return d.Model })); v != "" {
		lines = append(lines, resource+".model="+v)
	}
	if v := LabelValue(shared(inv.Devices, func(d device.Device) string { return d.Firmware })); v != "" {
		lines = append(lines, resource+".firmware="+v)
	}
	return lines
}

// shared is the attribute every device has in common, or "mixed" when they
// differ (a node with two card models or a half-done firmware update).
func shared(devs []device.Device, attr func(device.Device) string) string {
	v := attr(devs[0])
	for _, d := range devs[1:] {
		if attr(d) != v {
			return "mixed"
		}
	}
	return v
}

// LabelValue turns s into a valid Kubernetes label value: characters other
// than [A-Za-z0-9._-] become '-', leading and trailing non-alphanumerics are
// dropped, and the result is cut to 63 characters. "" when nothing is left.
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	if len(b) > maxValue {
		b = b[:maxValue]
	}
	return strings.TrimFunc(string(b), func(r rune) bool { return r > 0x7f || !isAlnum(byte(r)) })
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Write makes the file at path hold lines (one per line), atomically: a
// temporary file in the same directory renamed over it. It creates the
// directory and leaves an identical file untouched (changed=false). No
// lines removes the file.
func Write(path string, lines []string) (changed bool, err error) {
	if len(lines) == 0 {
		if err := os.Remove(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, fmt.Errorf("remove %s: %w", path, err)
		}
		return true, nil
	}
	data := []byte(strings.Join(lines, "\n") + "\n")
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := atomicfile.Write(path, data, atomicfile.WithMode(0o644)); err != nil {
		return false, err
	}
	return true, nil
}
