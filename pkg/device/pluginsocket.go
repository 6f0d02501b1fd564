package device

import (
	"path"
	"strings"
)

// PluginSocketName is the file name of lpu-device-plugin's socket in the
// kubelet's device plugin directory for an extended resource: the
// resource's last path element plus ".sock" ("hyperaccel.ai/lpu" →
// "lpu.sock"), each character outside [A-Za-z0-9._-] replaced by '-'.
// lpu-device-plugin serves there and lpu-nri doctor looks there.
func PluginSocketName(resource string) string {
	var b strings.Builder
	for _, r := range path.Base(resource) {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String() + ".sock"
}
