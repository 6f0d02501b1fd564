// Package sockettest gives tests a directory short enough for unix sockets.
//
//	sock := filepath.Join(sockettest.ShortDir(t), "kubelet.sock")
package sockettest

import (
	"os"
	"testing"
)

// ShortDir returns a new directory under /tmp, removed when the test ends.
// Unix socket paths must stay under 108 bytes, which a t.TempDir() path
// named after a long test does not promise.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "lpu")
	if err != nil {
		t.Fatalf("short dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
