package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeletRootDir: the kubelet paths derive from kubelet.rootDir unless
// set, and an explicit path wins.
func TestKubeletRootDir(t *testing.T) {
	tests := map[string]struct {
		yaml                         string
		dp, podRes, registry, plugin string
	}{
		"default": {yaml: "{}",
			dp: "/var/lib/kubelet/device-plugins", podRes: "/var/lib/kubelet/pod-resources/kubelet.sock",
			registry: "/var/lib/kubelet/plugins_registry", plugin: "/var/lib/kubelet/plugins/lpu.hyperaccel.ai"},
		"root only": {yaml: "{rootDir: /srv/kubelet}",
			dp: "/srv/kubelet/device-plugins", podRes: "/srv/kubelet/pod-resources/kubelet.sock",
			registry: "/srv/kubelet/plugins_registry", plugin: "/srv/kubelet/plugins/lpu.hyperaccel.ai"},
		"explicit paths win": {yaml: "{rootDir: /srv/kubelet, devicePluginDir: /dp, podResourcesSocket: /pr/kubelet.sock}",
			dp: "/dp", podRes: "/pr/kubelet.sock",
			registry: "/srv/kubelet/plugins_registry", plugin: "/srv/kubelet/plugins/lpu.hyperaccel.ai"},
		"paths without root keep the default root": {yaml: "{devicePluginDir: /x/device-plugins}",
			dp: "/x/device-plugins", podRes: "/var/lib/kubelet/pod-resources/kubelet.sock",
			registry: "/var/lib/kubelet/plugins_registry", plugin: "/var/lib/kubelet/plugins/lpu.hyperaccel.ai"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte("version: v1\nkubelet: " + tc.yaml + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			k := c.Kubelet
			got := []string{k.DevicePluginDir, k.PodResourcesSocket, k.RegistryDir(), k.DRAPluginDir()}
			want := []string{tc.dp, tc.podRes, tc.registry, tc.plugin}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("paths %v, want %v", got, want)
			}
		})
	}
}

// TestKubeletRootDirBad: a relative root fails the load on one line naming
// the field and the value; a named root that does not exist fails
// CheckRoot (at daemon start) the same way.
func TestKubeletRootDirBad(t *testing.T) {
	_, err := Parse([]byte("version: v1\nkubelet: {rootDir: var/lib/kubelet}\n"))
	if err == nil || err.Error() != `kubelet.rootDir: "var/lib/kubelet" must be an absolute path` {
		t.Fatalf("Parse = %v", err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		root, wantErr string
	}{
		"exists":          {root: dir},
		"default unknown": {root: DefaultKubeletRootDir}, // not named: never checked
		"missing":         {root: filepath.Join(dir, "gone"), wantErr: `kubelet.rootDir: "` + filepath.Join(dir, "gone") + `" does not exist`},
		"a file":          {root: file, wantErr: `kubelet.rootDir: "` + file + `" is not a directory`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte("version: v1\nkubelet: {rootDir: " + tc.root + "}\n"))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Kubelet.CheckRoot()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckRoot = %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr || strings.Contains(err.Error(), "\n")):
				t.Fatalf("CheckRoot = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
