package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

func TestOlderThanMin(t *testing.T) {
	for _, c := range []struct {
		major, minor string
		old, ok      bool
	}{
		{"1", "36", true, true}, {"1", "37", false, true}, {"1", "38", false, true}, {"1", "36+", true, true},
		{"1", "37+", false, true}, {"2", "0", false, true}, {"", "", false, false}, {"1", "x", false, false},
	} {
		old, ok := olderThanMin(&version.Info{Major: c.major, Minor: c.minor})
		if old != c.old || ok != c.ok {
			t.Errorf("%s.%s: old %v ok %v, want %v %v", c.major, c.minor, old, ok, c.old, c.ok)
		}
	}
}

// versionFrom is a discovery client answering one version.
type versionFrom version.Info

func (v versionFrom) ServerVersion() (*version.Info, error) { i := version.Info(v); return &i, nil }

func TestCheckAPIServerWarns(t *testing.T) {
	for _, c := range []struct {
		v    version.Info
		warn bool
	}{
		{version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.4"}, true},
		{version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}, false},
	} {
		var buf bytes.Buffer
		if err := checkAPIServer(context.Background(), versionFrom(c.v), slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatalf("%s: %v", c.v.GitVersion, err)
		}
		if got := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), c.v.GitVersion); got != c.warn {
			t.Errorf("%s: warned %v, want %v: %s", c.v.GitVersion, got, c.warn, buf.String())
		}
	}
}

// Below 1.36 (no granular claim-status authorization) lpu-dra refuses to
// run, naming the version and what to do (round 4, F4).
func TestRefusesWithoutGranularStatus(t *testing.T) {
	for _, v := range []version.Info{{Major: "1", Minor: "35", GitVersion: "v1.35.3"}, {Major: "1", Minor: "33+", GitVersion: "v1.33.1-eks"}} {
		err := checkAPIServer(context.Background(), versionFrom(v), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if !errors.Is(err, ErrNoGranularStatus) || !strings.Contains(err.Error(), v.GitVersion) || !strings.Contains(err.Error(), "mode: devicePlugin") {
			t.Errorf("%s: %v, want ErrNoGranularStatus naming the version and the way out", v.GitVersion, err)
		}
	}
}

// The real v1.37.2 API server gets no warning.
func TestNoWarningFromCurrentAPIServer(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := checkAPIServer(context.Background(), cs.Discovery(), slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("logged for %s: %s", clustertest.KubernetesVersion, buf.String())
	}
}
