package nriedit

import (
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Adjustment renders e as an NRI container adjustment. Each device node
// becomes a LinuxDevice; the runtime's NRI spec generator adds the
// matching device cgroup allow rule ("rw") for every added device, so no
// separate LinuxResources device rule is needed.
func Adjustment(e inject.Edits) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	for _, n := range e.DeviceNodes {
		adj.AddDevice(&api.LinuxDevice{
			Path:     n.Path,
			Type:     n.Type,
			Major:    n.Major,
			Minor:    n.Minor,
			FileMode: api.FileMode(n.FileMode),
		})
	}
	for _, m := range e.Mounts {
		adj.AddMount(&api.Mount{
			Destination: m.ContainerPath,
			Source:      m.HostPath,
			Type:        inject.MountType,
			Options:     inject.MountOptions(),
		})
	}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		adj.AddEnv(k, v)
	}
	return adj
}
