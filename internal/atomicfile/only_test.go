package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyWriter keeps this package the module's one durable write: no
// other production file renames files into place itself. Test kits
// (packages named <what>test, as layers_test.go names them) write no
// state a daemon reads back: internal/clustertest keeps a restarted
// scheduler's old log by renaming it.
func TestOnlyWriter(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "testdata" || name == "vendor" || (name != "test" && strings.HasSuffix(name, "test")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "atomicfile.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "os.Rename(") {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("os.Rename outside internal/atomicfile (use atomicfile.Write): %v", found)
	}
}
