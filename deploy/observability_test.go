package deploy_test

import (
	"encoding/json"
	"io/fs"
	"log/slog"
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
)

const (
	rulesFile     = chartDir + "/files/prometheus-rules.yaml"
	dashboardFile = chartDir + "/files/grafana-dashboard.json"
)

// codeMetrics collects the lpu_* metric names the daemons define, as
// readme_test.go does: every quoted "lpu_…" string in non-test Go files
// under cmd/.
func codeMetrics(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`"(lpu_[a-z_]+)"`)
	var names []string
	err := filepath.WalkDir("../cmd", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in cmd/: %v", len(names), names)
	}
	return names
}

// renderOnly renders one template of the chart with --set values.
func renderOnly(t *testing.T, helm, template string, sets ...string) []byte {
	t.Helper()
	out, err := runHelm(t, helm, append(templateArgs(sets...), "--show-only", template)...)
	if err != nil {
		t.Fatal(err)
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

// checkNames fails for every selected name that is not a daemon's metric
// (a histogram's _bucket, _sum and _count count as the histogram).
func checkNames(t *testing.T, where string, names, code []string) {
	t.Helper()
	if len(names) == 0 {
		t.Errorf("%s selects no metric", where)
	}
	for _, n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !slices.Contains(code, base) {
			t.Errorf("%s queries %s, which no daemon defines", where, n)
		}
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
// runbook needs, query only metrics the daemons export, and the chart's
// PrometheusRule carries exactly the rule file.
func TestAlertRules(t *testing.T) {
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups := parseRules(t, rulesFile, content)
	code := codeMetrics(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkNames(t, "alert "+r.Alert, selectors(t, r.Alert, r.Expr), code)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
	for _, want := range []string{"LPUDeviceUnhealthy", "LPUInjectorDisconnected", "LPURefusalsRising",
		"LPUAllocationsNotInjected", "LPUUnallocatedHolders", "LPUStrictRefusals"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}

	// The rendered PrometheusRule's spec is the rule file, and passes too.
	helm := helmBinary(t)
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	out := renderOnly(t, helm, "templates/prometheusrule.yaml", "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom")
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
	rendered := parseRules(t, "rendered PrometheusRule", spec)
	if len(rendered.Groups) != len(groups.Groups) || len(rendered.Groups[0].Rules) != len(groups.Groups[0].Rules) {
		t.Errorf("PrometheusRule has %d groups, the file %d", len(rendered.Groups), len(groups.Groups))
	}
	for i, r := range rendered.Groups[0].Rules {
		if f := groups.Groups[0].Rules[i]; r.Alert != f.Alert || r.Expr != f.Expr || r.Annotations["description"] != f.Annotations["description"] {
			t.Errorf("PrometheusRule rule %d (%s) differs from the file's (%s)", i, r.Alert, f.Alert)
		}
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
// only metrics the daemons export, and the panels the operators asked for
// are there; the chart ships it byte for byte.
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
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
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
	code := codeMetrics(t)
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
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target datasource %q", p.Title, tg.Datasource.UID)
			}
			names := selectors(t, "panel "+p.Title, grafanaVars.Replace(tg.Expr))
			checkNames(t, "panel "+p.Title, names, code)
			for _, n := range names {
				queried[n] = true
			}
		}
	}
	for _, want := range []string{"lpu_device_allocated", "lpu_largest_free_arc", "lpu_device_healthy",
		"lpu_allocations_total", "lpu_allocate_duration_seconds_bucket", "lpu_nri_refusals_total",
		"lpu_nri_connected", "lpu_device_info", "lpu_build_info"} {
		if !queried[want] {
			t.Errorf("no panel queries %s", want)
		}
	}

	helm := helmBinary(t)
	out := renderOnly(t, helm, "templates/grafana-dashboard.yaml", "metrics.grafanaDashboard.enabled=true")
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
