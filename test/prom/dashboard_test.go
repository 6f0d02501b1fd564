package prom

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// panelMode marks a dashboard panel that has data in one chart mode only
// (as chartcheck/observability_test.go reads it).
var panelMode = regexp.MustCompile(`\bMode (devicePlugin|dra) only\.`)

// grafanaVars stands in for Grafana's variables: a rate window of several
// one-second scrapes, and the test's node.
var grafanaVars = strings.NewReplacer("$__rate_interval", "30s", "$__interval", "5s", "$node", "node-a")

// panel is the part of a dashboard panel the test reads.
type panel struct {
	Title       string `json:"title"`
	Description string `json:"description"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardPanels renders the chart's dashboard ConfigMap and returns its
// panels.
func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	out := helmTemplate(t, "templates/grafana-dashboard.yaml", "metrics.grafanaDashboard.enabled=true")
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["lpu-node.json"]), &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard in the ConfigMap: %v (%d panels)", err, len(dash.Panels))
	}
	return dash.Panels
}

// checkDashboard: every query of every panel for this mode returns at least
// one series from the node's Prometheus; a query naming a metric no daemon
// exports returns none and fails.
func (n *node) checkDashboard(t *testing.T) {
	t.Helper()
	checked := 0
	for _, p := range dashboardPanels(t) {
		if m := panelMode.FindStringSubmatch(p.Description); m != nil && m[1] != n.mode {
			continue
		}
		for _, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			if got := n.prom.query(t, expr); len(got) == 0 {
				t.Errorf("mode %s: panel %q query returns no data: %s", n.mode, p.Title, expr)
			}
			checked++
		}
	}
	t.Logf("mode %s: %d dashboard queries returned data", n.mode, checked)
	if got := n.prom.query(t, `lpu_device_healthy_typo`); len(got) != 0 {
		t.Errorf("a metric no daemon exports returned %v", got)
	}
}

// chartEnv set to 1 makes TestLiveAlertsDevicePlugin rewrite docs/prometheus-run.svg.
const chartEnv = "LPU_UPDATE_CHART"

// plot draws healthy and allocated LPUs and allocate calls over the run
// from range queries of the node's Prometheus, as docs/prometheus-run.svg
// when chartEnv is 1 and to the test's temporary directory otherwise (so
// the drawing is always exercised).
func (n *node) plot(t *testing.T, begin time.Time) {
	t.Helper()
	end := time.Now()
	c := svgChart{
		Title:  "LPU node from Prometheus (mode devicePlugin)",
		XLabel: "seconds since the start of the run, 1 s steps",
		XMax:   end.Sub(begin).Seconds(),
		YMax:   10, YTick: 2,
		Series: []svgSeries{
			{Label: "healthy LPUs", Color: "#1a9850"},
			{Label: "allocated LPUs", Color: "#2166ac"},
			{Label: "allocate calls", Color: "#d73027"},
		},
	}
	exprs := []string{`sum(lpu_device_healthy)`, `sum(lpu_device_allocated)`, `sum(lpu_allocations_total)`}
	points := 0
	for i, expr := range exprs {
		rs := n.prom.queryRange(t, expr, begin, end, time.Second)
		if len(rs) != 1 {
			t.Fatalf("%s over the run: %d series", expr, len(rs))
		}
		for _, v := range rs[0].Values {
			ts, _ := v[0].(float64)
			s, _ := v[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) {
				continue
			}
			c.Series[i].Points = append(c.Series[i].Points, [2]float64{ts - float64(begin.Unix()), f})
			c.YMax = max(c.YMax, 2*math.Ceil(f/2)) // room for every value, on a tick
			points++
		}
	}
	if points < 30 {
		t.Fatalf("only %d points over the run", points)
	}
	path := filepath.Join(t.TempDir(), "prometheus-run.svg")
	if os.Getenv(chartEnv) == "1" {
		path = filepath.Join(repoRoot(t), "docs", "prometheus-run.svg")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.write(f); err != nil {
		f.Close()
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
	t.Logf("wrote %s (%d points, %.0f s)", path, points, c.XMax)
}
