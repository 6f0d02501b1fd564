package inject_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestGolden(t *testing.T) {
	for layout, l := range injecttest.GoldenLayouts() {
		t.Run(layout, func(t *testing.T) { testGolden(t, l.Setup, l.Suffix) })
	}
}

func testGolden(t *testing.T, setup func(testing.TB) (string, *device.Inventory, []device.Device, inject.Options), suffix string) {
	root, inv, _, opts := setup(t)
	spec, err := inject.Spec(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]any{
		"cdi-spec" + suffix + ".golden.json": spec,
	}
	for name, v := range outputs {
		t.Run(name, func(t *testing.T) {
			got := injecttest.GoldenJSON(t, root, v)
			path := filepath.Join("testdata", name)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from golden (rerun with -update if intended):\n%s", name, got)
			}
		})
	}
}
