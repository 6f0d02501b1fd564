package lpunode_test

import (
	"os"
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
		assertNoDeps(t, cmd, nil, forbidden)
	}
}

// releaseTags are the build tags every release build of the daemons
// passes: grpcnotrace keeps gRPC from importing golang.org/x/net/trace (its
// /debug/requests pages, which the daemons never serve), whose
// html/template calls reflect's MethodByName; with that reachable the
// linker keeps every exported method of every linked type (every API
// group's generated code in lpu-dra: 26 MiB of binary, 14 MiB of idle RSS,
// docs/benchmarks/binaries.md).
const releaseTags = "grpcnotrace"

// TestDaemonsLinkNoTemplates: built as released, no daemon links a template
// package, so nothing switches the linker's method pruning off again.
func TestDaemonsLinkNoTemplates(t *testing.T) {
	forbidden := []string{"golang.org/x/net/trace", "html/template", "text/template"}
	for _, cmd := range []string{"./cmd/lpu-device-plugin", "./cmd/lpu-dra", "./cmd/lpu-nri"} {
		assertNoDeps(t, cmd, []string{"-tags", releaseTags}, forbidden)
	}
}

// TestReleaseBuildsPassTags: every place that builds the daemons as they
// ship passes releaseTags; one without them ships lpu-dra 26 MiB larger.
func TestReleaseBuildsPassTags(t *testing.T) {
	for _, file := range []string{"Makefile", "deploy/container/build-oci.sh", "deploy/container/Dockerfile", "test/e2e/lib/cluster.sh", "cmd/lpu-dra/rss_test.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "-trimpath") || strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			n++
			if !strings.Contains(line, "-tags grpcnotrace") && !strings.Contains(line, `"-tags=grpcnotrace"`) {
				t.Errorf("%s builds without -tags %s: %s", file, releaseTags, strings.TrimSpace(line))
			}
		}
		if n == 0 {
			t.Errorf("%s: no release build (a -trimpath line) found", file)
		}
	}
}

// assertNoDeps fails if go list -deps cmd, with flags, names a package of
// forbidden or below one.
func assertNoDeps(t *testing.T, cmd string, flags, forbidden []string) {
	t.Helper()
	args := append(append([]string{"list"}, flags...), "-deps", cmd)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s links %s", cmd, dep)
			}
		}
	}
}
