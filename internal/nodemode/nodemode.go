// Package nodemode keeps one LPU mode per node: lpu-device-plugin and
// lpu-dra must never both serve the node's LPUs (they would be double
// booked), so each refuses to start while the other's kubelet socket
// answers. A socket file nobody serves (left by a crash) does not count.
package nodemode

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// RegistryDir is the kubelet's plugin registry directory next to a device
// plugin directory: /var/lib/kubelet/device-plugins → /var/lib/kubelet/plugins_registry.
func RegistryDir(devicePluginDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(devicePluginDir)), "plugins_registry")
}

// DRARegistrationSocket is where lpu-dra (driver inject.Driver) registers
// with the kubelet.
func DRARegistrationSocket(registryDir string) string {
	return filepath.Join(registryDir, inject.Driver+"-reg.sock")
}

// serving reports whether a process accepts connections on the unix socket.
func serving(path string) bool {
	c, err := net.DialTimeout("unix", path, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RefuseIfDRA fails when lpu-dra serves its registration socket in any of
// registryDirs; the device plugin calls it before it registers.
func RefuseIfDRA(registryDirs ...string) error {
	for _, dir := range registryDirs {
		if p := DRARegistrationSocket(dir); serving(p) {
			return refusal(p)
		}
	}
	return nil
}

func refusal(p string) error {
	return fmt.Errorf("lpu-dra serves this node (%s answers): the device plugin and the DRA driver must not both serve the same LPUs; choose one per node (chart value mode)", p)
}

// RefuseIfDevicePlugin fails when lpu-device-plugin serves socket (its
// socket in the kubelet's device plugin dir); lpu-dra calls it at start.
func RefuseIfDevicePlugin(socket string) error {
	if serving(socket) {
		return fmt.Errorf("lpu-device-plugin serves this node (%s answers): the device plugin and the DRA driver must not both serve the same LPUs; choose one per node (chart value mode)", socket)
	}
	return nil
}
