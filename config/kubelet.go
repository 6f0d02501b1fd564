package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// The kubelet's paths below its root dir.
const (
	kubeletDevicePlugins  = "device-plugins"
	kubeletPodResources   = "pod-resources/kubelet.sock"
	kubeletPluginRegistry = "plugins_registry"
	kubeletPlugins        = "plugins"
)

// applyDefaults derives every kubelet path left unset from RootDir.
func (k *Kubelet) applyDefaults() {
	setString(&k.RootDir, DefaultKubeletRootDir)
	setString(&k.DevicePluginDir, filepath.Join(k.RootDir, kubeletDevicePlugins))
	setString(&k.PodResourcesSocket, filepath.Join(k.RootDir, kubeletPodResources))
	setDuration(&k.PodResourcesTimeout, DefaultPodResourcesTimeout)
}

// validate checks the paths; one derived from a bad rootDir is not
// reported again (the rootDir error says it all).
func (k Kubelet) validate(v *validator) {
	v.absPath("kubelet.rootDir", k.RootDir)
	rootOK := filepath.IsAbs(k.RootDir) && !strings.ContainsRune(k.RootDir, 0)
	if rootOK || k.DevicePluginDir != filepath.Join(k.RootDir, kubeletDevicePlugins) {
		v.absPath("kubelet.devicePluginDir", k.DevicePluginDir)
	}
	if rootOK || k.PodResourcesSocket != filepath.Join(k.RootDir, kubeletPodResources) {
		v.absPath("kubelet.podResourcesSocket", k.PodResourcesSocket)
	}
	v.positive("kubelet.podResourcesTimeout", k.PodResourcesTimeout)
}

// RegistryDir is the kubelet's plugin registry, <rootDir>/plugins_registry,
// where lpu-dra registers unless --registry-dir says otherwise.
func (k Kubelet) RegistryDir() string {
	return filepath.Join(k.RootDir, kubeletPluginRegistry)
}

// DRAPluginDir is lpu-dra's kubelet plugin dir,
// <rootDir>/plugins/lpu.hyperaccel.ai, unless --plugin-dir says otherwise.
func (k Kubelet) DRAPluginDir() string {
	return filepath.Join(k.RootDir, kubeletPlugins, inject.Driver)
}

// CheckRoot fails when RootDir was named (it is not the default) and does
// not exist as a directory: a typo there would leave the daemon waiting
// for a kubelet that lives elsewhere. The default is not checked, so a
// daemon given every kubelet path explicitly, or started before the
// kubelet, behaves as before. Daemons call it at start, not at config
// load, so configs can be parsed on any machine.
func (k Kubelet) CheckRoot() error {
	if k.RootDir == DefaultKubeletRootDir {
		return nil
	}
	return CheckDir("kubelet.rootDir", k.RootDir)
}

// CheckDir fails, on one line naming the config field and the value, when
// path does not exist or is not a directory: what a daemon checks at start
// for the directories it reads under (kubelet.rootDir, root).
func CheckDir(field, path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %q does not exist", field, path)
	case err != nil:
		return fmt.Errorf("%s: %q: %w", field, path, err)
	case !fi.IsDir():
		return fmt.Errorf("%s: %q is not a directory", field, path)
	}
	return nil
}
