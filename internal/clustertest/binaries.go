package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the control plane, as test/e2e/tools.sh builds them.
const (
	// KubernetesVersion is the version of kube-apiserver, kube-scheduler,
	// kube-controller-manager and kubectl.
	KubernetesVersion = "v1.37.2"
	// EtcdVersion is the version of etcd.
	EtcdVersion = "v3.7.0"
)

// DefaultCacheDir is where tools.sh caches built tools unless
// LPU_E2E_CACHE says otherwise.
const DefaultCacheDir = "/var/cache/lpu-e2e"

// Binaries are the paths of the control-plane programs.
type Binaries struct {
	Etcd                  string
	KubeAPIServer         string
	KubeScheduler         string
	KubeControllerManager string
	// Kubectl is not run by this package; it is here for tests that want
	// to drive the cluster the way a user does.
	Kubectl string
}

// FindBinaries locates the binaries in the tools.sh cache
// ($LPU_E2E_CACHE, default /var/cache/lpu-e2e) and checks that each one is
// an executable file.
func FindBinaries() (Binaries, error) {
	cache := os.Getenv("LPU_E2E_CACHE")
	if cache == "" {
		cache = DefaultCacheDir
	}
	kube := filepath.Join(cache, "kube-"+KubernetesVersion)
	b := Binaries{
		Etcd:                  filepath.Join(cache, "etcd-"+EtcdVersion, "etcd"),
		KubeAPIServer:         filepath.Join(kube, "kube-apiserver"),
		KubeScheduler:         filepath.Join(kube, "kube-scheduler"),
		KubeControllerManager: filepath.Join(kube, "kube-controller-manager"),
		Kubectl:               filepath.Join(kube, "kubectl"),
	}
	return b, b.check()
}

func (b Binaries) check() error {
	for _, p := range []string{b.Etcd, b.KubeAPIServer, b.KubeScheduler, b.KubeControllerManager} {
		if err := CheckExecutable(p); err != nil {
			return err
		}
	}
	return nil
}

// CheckExecutable says why path is not an executable regular file, or
// returns nil.
func CheckExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("control-plane binary: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("control-plane binary %s: not an executable file", path)
	}
	return nil
}
