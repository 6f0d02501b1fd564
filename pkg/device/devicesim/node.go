package devicesim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// CheckCount checks a count of simulated LPUs: 1 to MaxDevices.
func CheckCount(n int) error {
	if n < 1 || n > MaxDevices {
		return fmt.Errorf("simulate %d LPUs: want 1 to %d", n, MaxDevices)
	}
	return nil
}

// SpecFor is the node of n LPUs WriteNode writes: rings of 8 (at least
// one ring), the ring count lowered until it divides n so all rings are
// equal.
func SpecFor(n int) Spec {
	return Spec{Devices: n, Rings: ringsFor(n)}
}

func ringsFor(n int) int {
	r := max(n/8, 1)
	for n%r != 0 {
		r--
	}
	return r
}

// ErrNotSimulation is returned by WriteNode for a root it must not write
// into: "/", or a directory that holds files but no
// device.TreeMarker (a host's root mounted somewhere, a typo).
var ErrNotSimulation = errors.New("not a simulated node")

// WriteNode writes the node of n LPUs (SpecFor) in backend's layout
// (device.BackendLPU, device.BackendXilinx or device.BackendPCI; "" is
// device.BackendLPU) at root, the discovery root the daemons are then
// given. It writes only into a missing or empty directory or one that
// already holds a simulated node (it is idempotent like Write, so every
// pod of a node may run it); anything else wraps ErrNotSimulation.
func WriteNode(root string, n int, backend string) error {
	if err := CheckCount(n); err != nil {
		return err
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	spec := SpecFor(n)
	spec.Backend = backend
	if err := Write(root, spec); err != nil {
		return fmt.Errorf("simulate %d LPUs: %w", n, err)
	}
	return nil
}

// WriteNodeTo is WriteNode, then one line on w saying what it wrote: the
// whole of lpu-nri simulate, run before the daemons that are given the
// same root.
func WriteNodeTo(w io.Writer, root string, n int, backend string) error {
	if err := WriteNode(root, n, backend); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "wrote %d LPUs in %d rings (%s layout) under %s\n", n, SpecFor(n).Rings, backend, root)
	return err
}

// checkRoot refuses "/" and a directory with files but no marker. A tree
// written before the marker existed is known by its library placeholder,
// so a node simulated by an older release is taken over on upgrade.
func checkRoot(root string) error {
	clean := filepath.Clean(root)
	if clean == "/" || clean == "." {
		return fmt.Errorf("simulate under %q: %w: name a directory of its own", root, ErrNotSimulation)
	}
	if device.IsMarkedTree(clean) {
		return nil
	}
	if b, err := os.ReadFile(filepath.Join(clean, Library)); err == nil && string(b) == libraryPlaceholder {
		return nil
	}
	d, err := os.Open(clean)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("simulate under %s: %w", root, err)
	}
	defer d.Close()
	if _, err := d.Readdirnames(1); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("%w: it holds files but no %s", ErrNotSimulation, device.TreeMarker)
		}
		return fmt.Errorf("simulate under %s: %w", root, err)
	}
	return nil
}
