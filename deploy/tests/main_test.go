package tests_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// The names every rendering uses, and the chart relative to the deploy
// directory the tests run in.
const (
	release   = charttest.Release
	namespace = charttest.Namespace
	chartDir  = "helm/lpu-node"
)

// TestMain runs the tests in the deploy directory: the artefacts they check
// (manifests, runtime snippets, container build, release and version
// scripts) are named relative to it.
func TestMain(m *testing.M) {
	if err := os.Chdir(charttest.Dir()); err != nil {
		fmt.Fprintf(os.Stderr, "chdir %s: %v\n", charttest.Dir(), err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
