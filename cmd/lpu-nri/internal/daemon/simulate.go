package daemon

import (
	"fmt"
	"io"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// Simulate writes the simulated node of n LPUs in the config's
// simulate.backend layout under cfg.Root (devicesim.WriteNode) and says
// so on w: lpu-nri simulate, run before the daemons that are given the
// same root.
func Simulate(cfg *config.Config, n int, w io.Writer) error {
	if err := devicesim.WriteNode(cfg.Root, n, cfg.Simulate.Backend); err != nil {
		return err
	}
	spec := devicesim.SpecFor(n)
	_, err := fmt.Fprintf(w, "wrote %d LPUs in %d rings (%s layout) under %s\n", n, spec.Rings, cfg.Simulate.Backend, cfg.Root)
	return err
}
