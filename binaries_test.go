package lpunode_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinariesLinkOnlyWhatTheyRun: the device plugin, lpu-dra and
// kubectl-lpu never speak NRI, so they must not link the NRI API nor the
// WebAssembly runtime its module brings (wazero): only lpu-nri renders
// NRI adjustments (cmd/lpu-nri/internal/nriedit). A shared package that
// imports either again pulls it into every binary; this fails then.
func TestBinariesLinkOnlyWhatTheyRun(t *testing.T) {
	forbidden := []string{"github.com/tetratelabs/wazero", "github.com/containerd/nri"}
	for _, cmd := range []string{"./cmd/lpu-device-plugin", "./cmd/lpu-dra", "./cmd/kubectl-lpu"} {
		out, err := exec.Command("go", "list", "-deps", cmd).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", cmd, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s links %s", cmd, dep)
				}
			}
		}
	}
}
