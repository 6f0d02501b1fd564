package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRename: the file moves into place over what was there; a missing
// source is an error naming the destination.
func TestRename(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "new.tmp"), filepath.Join(dir, "log")
	for path, data := range map[string]string{oldPath: "fresh", newPath: "stale"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Rename(oldPath, newPath); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(newPath); err != nil || string(b) != "fresh" {
		t.Fatalf("after Rename %s holds %q (%v), want fresh", newPath, b, err)
	}
	if _, err := os.Stat(oldPath); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", oldPath, err)
	}
	err := Rename(oldPath, newPath, WithoutSync())
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), newPath) {
		t.Fatalf("Rename of a missing file: %v, want an error naming %s", err, newPath)
	}
}
