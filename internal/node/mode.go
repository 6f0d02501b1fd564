package node

// One LPU mode per node: lpu-device-plugin and lpu-dra must never both
// serve the node's LPUs (they would be double booked), so each refuses to
// start while the other's kubelet socket answers. A socket file nobody
// serves (left by a crash) does not count.

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

// draSockets are lpu-dra's possible registration sockets in dir: the
// plain name, and <driver>-<pod UID>-reg.sock of rolling-update mode
// (kubeletplugin.RollingUpdate; its hashed fallback is used only when that
// path is longer than a unix socket path may be).
func draSockets(dir string) []string {
	out := []string{DRARegistrationSocket(dir)}
	rolling, _ := filepath.Glob(filepath.Join(dir, inject.Driver+"-*-reg.sock")) // the pattern is valid
	return append(out, rolling...)
}

// RefuseIfDRA fails when lpu-dra serves a registration socket in any of
// registryDirs; the device plugin calls it before it registers.
func RefuseIfDRA(registryDirs ...string) error {
	for _, dir := range registryDirs {
		for _, p := range draSockets(dir) {
			if serving(p) {
				return refusal(p)
			}
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
