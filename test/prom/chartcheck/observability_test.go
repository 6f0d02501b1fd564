package chartcheck

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics/devicemetricstest"
)

var (
	rulesFile     = filepath.Join(charttest.ChartDir(), "files", "prometheus-rules.yaml")
	dashboardFile = filepath.Join(charttest.ChartDir(), "files", "grafana-dashboard.json")
)

// modeDaemons are the daemons each chart mode runs on an LPU node
// (lpu-nri runs in both).
var modeDaemons = map[string][]string{
	"devicePlugin": {"lpu-device-plugin", "lpu-nri"},
	"dra":          {"lpu-dra", "lpu-nri"},
}

// modes lists the chart's modes.
var modes = slices.Sorted(maps.Keys(modeDaemons))

// modeMetrics returns, per chart mode, the metric names its daemons
// export: deploy/metrics/<daemon>.txt, which each daemon's tests generate
// from its real registry and fail on when stale
// (internal/devicemetrics/devicemetricstest).
func modeMetrics(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for mode, daemons := range modeDaemons {
		out[mode] = map[string]string{}
		for _, d := range daemons {
			names := devicemetricstest.Read(t, d)
			if len(names) < 5 {
				t.Fatalf("%s lists only %d metrics: %v", d, len(names), names)
			}
			maps.Copy(out[mode], names)
		}
	}
	return out
}

// panelMode marks a dashboard panel that has data in one chart mode only:
// its description says so, for the reader and for this test.
var panelMode = regexp.MustCompile(`\bMode (devicePlugin|dra) only\.`)

// forModes returns the modes a rule or panel is for: the one marked, or
// every mode when unmarked; an unknown mode is an error.
func forModes(marked string) ([]string, error) {
	switch {
	case marked == "":
		return modes, nil
	case slices.Contains(modes, marked):
		return []string{marked}, nil
	}
	return nil, fmt.Errorf("unknown mode %q (want one of %v)", marked, modes)
}

// unexported lists the selected names that a daemon of one of modes does
// not export, as "name (mode)"; a histogram's _bucket, _sum and _count
// count as the histogram. up is Prometheus' own series of every scrape
// target, so every mode has it.
func unexported(names, modes []string, emitted map[string]map[string]string) []string {
	var out []string
	for _, mode := range modes {
		for _, n := range names {
			if _, ok := emitted[mode][n]; ok || n == "up" {
				continue
			}
			found := false
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suf); ok && emitted[mode][b] == "histogram" {
					found = true
				}
			}
			if !found {
				out = append(out, n+" ("+mode+")")
			}
		}
	}
	return out
}

// promParser is the PromQL parser Prometheus itself uses.
var promParser = parser.NewParser(parser.Options{})

// selectors returns the metric names an expression selects.
func selectors(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// checkNames fails for every selected name that no daemon of one of the
// modes exports, and for an expression that selects nothing.
func checkNames(t *testing.T, where string, names []string, marked string, emitted map[string]map[string]string) {
	t.Helper()
	if len(names) == 0 {
		t.Errorf("%s selects no metric", where)
	}
	modes, err := forModes(marked)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	for _, n := range unexported(names, modes, emitted) {
		t.Errorf("%s queries %s, which no daemon of that mode exports (mark it for one mode, or fix the name)", where, n)
	}
}

// parseRules checks a rule file as `promtool check rules` does: strict YAML,
// every expression parsed by PromQL, alert label and annotation templates
// parsed, names valid.
func parseRules(t *testing.T, where string, content []byte) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", where, err)
	}
	if groups == nil {
		t.FailNow()
	}
	return groups
}

// TestAlertRules: the shipped alerts pass promtool's checks, cover what the
// runbook needs, query only metrics the daemons of each mode they are for
// export (annotation mode: devicePlugin|dra, or both), and the chart's
// PrometheusRule carries exactly the rule file's rules for its mode.
func TestAlertRules(t *testing.T) {
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups := parseRules(t, rulesFile, content)
	emitted := modeMetrics(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkNames(t, "alert "+r.Alert, selectors(t, r.Alert, r.Expr), r.Annotations["mode"], emitted)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
	for _, want := range []string{"LPUDeviceUnhealthy", "LPUInjectorDisconnected", "LPURefusalsRising",
		"LPUAllocationsNotInjected", "LPUUnallocatedHolders", "LPUStrictRefusals",
		"LPUMetricsTargetDown", "LPUMetricsAbsent", "LPUUninjectedAllocations", "LPUClaimPrepareRefusals",
		"LPUClaimStalePreparation", "LPUHeldByDevicePluginPods", "LPUTemperatureHigh", "LPUTemperatureCritical"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}

	// The rendered PrometheusRule's spec is the rule file, and passes too.
	helm := charttest.Helm(t)
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	out := charttest.Render(t, helm, "--show-only", "templates/prometheusrule.yaml", "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom")
	if err := yaml.UnmarshalStrict(out, &rule); err != nil {
		t.Fatalf("PrometheusRule: %v\n%s", err, out)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Errorf("rendered %s %s", rule.APIVersion, rule.Kind)
	}
	spec, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	// The default mode (devicePlugin) carries every rule not marked dra.
	rendered := parseRules(t, "rendered PrometheusRule", spec)
	var fileDP []rulefmt.Rule
	for _, r := range groups.Groups[0].Rules {
		if r.Annotations["mode"] != "dra" {
			fileDP = append(fileDP, r)
		}
	}
	if len(rendered.Groups) != len(groups.Groups) || len(rendered.Groups[0].Rules) != len(fileDP) {
		t.Errorf("PrometheusRule has %d groups and %d rules, the file %d and %d for mode devicePlugin",
			len(rendered.Groups), len(rendered.Groups[0].Rules), len(groups.Groups), len(fileDP))
	}
	for i, r := range rendered.Groups[0].Rules {
		if i >= len(fileDP) {
			break
		}
		if f := fileDP[i]; r.Alert != f.Alert || r.Expr != f.Expr || r.Annotations["description"] != f.Annotations["description"] {
			t.Errorf("PrometheusRule rule %d (%s) differs from the file's (%s)", i, r.Alert, f.Alert)
		}
	}

	// Mode dra leaves out the device plugin's rules, and only those.
	out = charttest.Render(t, helm, "--show-only", "templates/prometheusrule.yaml", "metrics.prometheusRule.enabled=true", "mode=dra")
	rule.Spec = nil
	if err := yaml.UnmarshalStrict(out, &rule); err != nil {
		t.Fatalf("PrometheusRule (dra): %v\n%s", err, out)
	}
	if spec, err = yaml.Marshal(rule.Spec); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range parseRules(t, "rendered PrometheusRule (dra)", spec).Groups[0].Rules {
		got = append(got, r.Alert)
	}
	for _, r := range groups.Groups[0].Rules {
		if m := r.Annotations["mode"]; m == "" || m == "dra" {
			want = append(want, r.Alert)
		}
	}
	if !slices.Equal(got, want) || slices.Contains(got, "LPUStrictRefusals") {
		t.Errorf("mode dra PrometheusRule has %v, want %v", got, want)
	}
}

// TestModeCheckRejects: the mode check fails for a name one mode lacks,
// for a name marked for the wrong mode and for an unknown mode, and passes
// what each mode exports.
func TestModeCheckRejects(t *testing.T) {
	emitted := modeMetrics(t)
	tests := map[string]struct {
		expr, mode string
		wantBad    []string
		wantErr    bool
	}{
		"device series, both modes":     {expr: "lpu_device_healthy == 0"},
		"nri, both modes":               {expr: "lpu_nri_connected == 0"},
		"histogram bucket":              {expr: "rate(lpu_dra_prepare_duration_seconds_bucket[5m])", mode: "dra"},
		"device plugin only, unmarked":  {expr: "lpu_allocations_total", wantBad: []string{"lpu_allocations_total (dra)"}},
		"dra only, unmarked":            {expr: "lpu_dra_prepared_claims", wantBad: []string{"lpu_dra_prepared_claims (devicePlugin)"}},
		"holder series marked dra":      {expr: "lpu_device_allocated", mode: "dra", wantBad: []string{"lpu_device_allocated (dra)"}},
		"typo":                          {expr: "lpu_device_health", wantBad: []string{"lpu_device_health (dra)", "lpu_device_health (devicePlugin)"}},
		"unknown mode":                  {expr: "lpu_device_healthy", mode: "kubelet", wantErr: true},
		"device plugin only, marked":    {expr: "lpu_largest_free_arc", mode: "devicePlugin"},
		"sum suffix of a non-histogram": {expr: "lpu_device_healthy_sum", wantBad: []string{"lpu_device_healthy_sum (dra)", "lpu_device_healthy_sum (devicePlugin)"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ms, err := forModes(tc.mode)
			if (err != nil) != tc.wantErr {
				t.Fatalf("forModes(%q) = %v", tc.mode, err)
			}
			bad := unexported(selectors(t, name, tc.expr), ms, emitted)
			slices.Sort(bad)
			slices.Sort(tc.wantBad)
			if !slices.Equal(bad, tc.wantBad) {
				t.Fatalf("unexported = %v, want %v", bad, tc.wantBad)
			}
		})
	}
}

// TestAlertRulesRejectBadInput: the checker the test relies on does fail on
// a broken expression, a broken template and an unknown field.
func TestAlertRulesRejectBadInput(t *testing.T) {
	cases := map[string]string{
		"bad expr":      "groups: [{name: g, rules: [{alert: A, expr: 'sum(lpu_nri_connected'}]}]",
		"bad template":  "groups: [{name: g, rules: [{alert: A, expr: up, annotations: {summary: '{{ $labels.x '}}]}]",
		"unknown field": "groups: [{name: g, rules: [{alert: A, expr: up, severity: page}]}]",
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, errs := rulefmt.Parse([]byte(c), false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler)); len(errs) == 0 {
				t.Errorf("rulefmt accepted %s", c)
			}
		})
	}
}

// grafanaVars stands in for the dashboard's variables so its queries parse.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$node", ".*")

// TestDashboard: the dashboard is valid JSON with a stable uid, every panel
// uses the datasource variable, every query parses as PromQL and queries
// only metrics the daemons of each mode the panel is for export (its
// description ends "Mode devicePlugin only." or "Mode dra only.", else
// both), and the panels the operators asked for are there; the chart
// ships it byte for byte.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID          int    `json:"id"`
			Title       string `json:"title"`
			Type        string `json:"type"`
			Description string `json:"description"`
			Datasource  struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID != "lpu-node" || dash.Title == "" {
		t.Errorf("uid %q title %q", dash.UID, dash.Title)
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Contains(vars, "datasource") || !slices.Contains(vars, "node") {
		t.Errorf("template variables %v, want datasource and node", vars)
	}
	emitted := modeMetrics(t)
	queried := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d targets", p.Title, p.Datasource.UID, len(p.Targets))
		}
		var mode string
		if m := panelMode.FindStringSubmatch(p.Description); m != nil {
			mode = m[1]
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target datasource %q", p.Title, tg.Datasource.UID)
			}
			names := selectors(t, "panel "+p.Title, grafanaVars.Replace(tg.Expr))
			checkNames(t, "panel "+p.Title, names, mode, emitted)
			for _, n := range names {
				queried[n] = true
			}
		}
	}
	for _, want := range []string{"lpu_device_allocated", "lpu_largest_free_arc", "lpu_device_healthy",
		"lpu_allocations_total", "lpu_allocate_duration_seconds_bucket", "lpu_nri_refusals_total",
		"lpu_nri_connected", "lpu_device_info", "lpu_build_info", "lpu_dra_prepared_claims",
		"lpu_dra_prepare_refusals_total", "lpu_dra_prepare_duration_seconds_bucket"} {
		if !queried[want] {
			t.Errorf("no panel queries %s", want)
		}
	}

	helm := charttest.Helm(t)
	out := charttest.Render(t, helm, "--show-only", "templates/grafana-dashboard.yaml", "metrics.grafanaDashboard.enabled=true")
	var cm struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["lpu-node.json"] != strings.TrimSuffix(string(b), "\n") || cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap: labels %v, data equal to the file: %v", cm.Metadata.Labels, cm.Data["lpu-node.json"] == strings.TrimSuffix(string(b), "\n"))
	}
}
