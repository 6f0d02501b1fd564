package prom

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/lab/pngchart"
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

// pngEnv set to 1 makes TestLiveAlertsDevicePlugin rewrite docs/prometheus-run.png.
const pngEnv = "LPU_UPDATE_PNG"

// plot draws healthy and allocated LPUs over the run from a range query of
// the node's Prometheus, as docs/prometheus-run.png when pngEnv is 1 and
// to the test's temporary directory otherwise (so the drawing is always
// exercised).
func (n *node) plot(t *testing.T, begin time.Time) {
	t.Helper()
	end := time.Now()
	lines := []struct {
		label, expr string
		col         color.RGBA
	}{
		{"HEALTHY LPUS", `sum(lpu_device_healthy)`, color.RGBA{26, 152, 80, 255}},
		{"ALLOCATED LPUS", `sum(lpu_device_allocated)`, color.RGBA{33, 102, 172, 255}},
		{"ALLOCATE CALLS", `sum(lpu_allocations_total)`, color.RGBA{215, 48, 39, 255}},
	}
	c := pngchart.New(720, 360, color.RGBA{255, 255, 255, 255})
	ink := color.RGBA{40, 40, 40, 255}
	const x0, x1, y0, y1 = 60, 700, 300, 60 // plot area: y0 is the bottom
	c.Rect(x0, y1, x0+1, y0, ink)
	c.Rect(x0, y0, x1, y0+1, ink)
	c.Text(x0, 12, "LPU NODE FROM PROMETHEUS (DEVICEPLUGIN)", 2, ink)
	const ymax = 10.0
	for v := 0; v <= 10; v += 2 {
		y := y0 - int(float64(v)/ymax*float64(y0-y1))
		c.Rect(x0-4, y, x0, y+1, ink)
		c.Text(x0-10-pngchart.TextWidth(strconv.Itoa(v), 1), y-3, strconv.Itoa(v), 1, ink)
	}
	span := end.Sub(begin).Seconds()
	c.Text(x0, y0+8, "0 S", 1, ink)
	c.Text(x1-pngchart.TextWidth(fmt.Sprintf("%.0f S", span), 1), y0+8, fmt.Sprintf("%.0f S", span), 1, ink)
	points := 0
	for i, l := range lines {
		rs := n.prom.queryRange(t, l.expr, begin, end, time.Second)
		if len(rs) != 1 {
			t.Fatalf("%s over the run: %d series", l.expr, len(rs))
		}
		px, py := -1, 0
		for _, v := range rs[0].Values {
			ts, _ := v[0].(float64)
			s, _ := v[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) {
				continue
			}
			x := x0 + int((ts-float64(begin.Unix()))/span*float64(x1-x0))
			y := y0 - int(math.Min(f, ymax)/ymax*float64(y0-y1))
			if px >= 0 { // a step line from the previous point
				c.Rect(px, py-1, x, py+1, l.col)
				c.Rect(x-1, min(py, y)-1, x+1, max(py, y)+1, l.col)
			}
			c.Rect(x-2, y-2, x+2, y+2, l.col)
			px, py = x, y
			points++
		}
		c.Rect(x0+10+i*210, y0+30, x0+24+i*210, y0+44, l.col)
		c.Text(x0+30+i*210, y0+34, l.label, 1, ink)
	}
	if points < 30 {
		t.Fatalf("only %d points over the run", points)
	}
	path := filepath.Join(t.TempDir(), "prometheus-run.png")
	if os.Getenv(pngEnv) == "1" {
		path = filepath.Join(repoRoot(t), "docs", "prometheus-run.png")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.Encode(f); err != nil {
		t.Fatalf("encode %s: %v", path, err)
	}
	t.Logf("wrote %s (%d points, %.0f s)", path, points, span)
}
