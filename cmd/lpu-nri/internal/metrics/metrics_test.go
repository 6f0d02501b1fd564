package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics/devicemetricstest"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
)

// TestSeries checks the series lpu-nri's registry exposes, as the daemon
// serves it through metricsserver.
func TestSeries(t *testing.T) {
	m := New()
	srv := httptest.NewServer(metricsserver.Handler(m.Registry, nil, nil))
	defer srv.Close()
	m.Injections.Add(3)
	m.Refusals.WithLabelValues(verify.ReasonBadSeal).Inc()
	m.Connected.Set(1)
	m.Build.WithLabelValues("lpu-nri", "1.2.3", "go1.26").Set(1)
	m.WatchLedger(func() map[string]int { return map[string]int{"team-a": 7} })
	rsp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	// The chart's tests check alerts and panels against this list.
	devicemetricstest.Check(t, "lpu-nri", body)
	for _, want := range []string{
		"lpu_nri_injections_total 3",
		`lpu_nri_refusals_total{reason="bad-seal"} 1`,
		`lpu_nri_refusals_total{reason="pod-annotation"} 0`,
		"lpu_nri_connected 1",
		`lpu_nri_ledger_ids{namespace="team-a"} 7`,
		"lpu_nri_ledger_share_refused_total 0",
		`lpu_build_info{daemon="lpu-nri",goversion="go1.26",version="1.2.3"} 1`,
		"lpu_nri_unallocated_holders 0",
		"lpu_nri_create_container_duration_seconds_count 0",
		"go_goroutines",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want+" ") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
