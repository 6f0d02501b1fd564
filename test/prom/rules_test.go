package prom

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
	"sigs.k8s.io/yaml"
)

// series is one promtool input series: a selector and its values in
// promtool's expanding notation, one per evaluation interval (1m).
type series struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// alertCase is one alert's fault on a node: the series of a healthy node,
// the same series once the fault happened, the minute at which the fault
// first makes the expression true, and the labels and $value of the alert
// it raises (the expression's output labels; the rule's own labels are
// added from the rule).
type alertCase struct {
	healthy, fault []series
	onset          time.Duration
	labels         map[string]string
	value          float64 // only annotations that print $value read it
}

// target labels are the ones a scrape with honorLabels keeps from the
// chart's ServiceMonitor: the daemon's own (node, device) and the target's.
const (
	dpTarget  = `job="lpu-node",namespace="kube-system",pod="lpu-node-x7k2p",container="device-plugin"`
	nriTarget = `job="lpu-node",namespace="kube-system",pod="lpu-node-x7k2p",container="lpu-nri"`
	draTarget = `job="lpu-node",namespace="kube-system",pod="lpu-node-dra-q8m4z",container="lpu-dra"`
)

// targetLabels returns the labels of a target selector body (as dpTarget)
// with extra pairs added.
func targetLabels(target string, extra ...string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(target, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = strings.Trim(v, `"`)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// holder is the labels of the alerts that sum by namespace and pod.
var holder = map[string]string{"namespace": "kube-system", "pod": "lpu-node-x7k2p"}

// alertCases are the faults, one per alert of the chart. A new alert
// without a case here fails TestEveryAlertHasACase.
var alertCases = map[string]alertCase{
	"LPUDeviceUnhealthy": {
		healthy: []series{
			{`lpu_device_healthy{` + dpTarget + `,node="node-a",device="lpu3"}`, "1x40"},
			{`lpu_device_healthy{` + dpTarget + `,node="node-a",device="lpu4"}`, "1x40"},
		},
		fault: []series{
			{`lpu_device_healthy{` + dpTarget + `,node="node-a",device="lpu3"}`, "1x5 0x35"},
			{`lpu_device_healthy{` + dpTarget + `,node="node-a",device="lpu4"}`, "1x40"},
		},
		onset: 6 * time.Minute,
		labels: map[string]string{"job": "lpu-node", "namespace": "kube-system", "pod": "lpu-node-x7k2p",
			"container": "device-plugin", "node": "node-a", "device": "lpu3"},
	},
	"LPUInjectorDisconnected": {
		healthy: []series{{`lpu_nri_connected{` + nriTarget + `,node="node-a"}`, "1x40"}},
		fault:   []series{{`lpu_nri_connected{` + nriTarget + `,node="node-a"}`, "1x5 0x35"}},
		onset:   6 * time.Minute,
		labels: map[string]string{"job": "lpu-node", "namespace": "kube-system", "pod": "lpu-node-x7k2p",
			"container": "lpu-nri", "node": "node-a"},
	},
	"LPURefusalsRising": {
		healthy: []series{{`lpu_nri_refusals_total{` + nriTarget + `,reason="pod-annotation"}`, "0x40"}},
		// one refused container a minute from minute 6 on
		fault:  []series{{`lpu_nri_refusals_total{` + nriTarget + `,reason="pod-annotation"}`, "0x5 1+1x35"}},
		onset:  6 * time.Minute,
		labels: map[string]string{"namespace": "kube-system", "pod": "lpu-node-x7k2p", "reason": "pod-annotation"},
	},
	"LPUAllocationsNotInjected": {
		// healthy: every allocation is injected in the same minute
		healthy: []series{
			{`lpu_allocations_total{` + dpTarget + `,result="contiguous"}`, "0x5 1+1x35"},
			{`lpu_nri_injections_total{` + nriTarget + `}`, "0x5 1+1x35"},
		},
		fault: []series{
			{`lpu_allocations_total{` + dpTarget + `,result="contiguous"}`, "0x5 1+1x35"},
			{`lpu_nri_injections_total{` + nriTarget + `}`, "0x40"},
		},
		onset:  6 * time.Minute,
		labels: holder,
	},
	"LPUUnallocatedHolders": {
		healthy: []series{{`lpu_nri_unallocated_holders{` + nriTarget + `}`, "0x40"}},
		fault:   []series{{`lpu_nri_unallocated_holders{` + nriTarget + `}`, "0x5 2x35"}},
		onset:   6 * time.Minute,
		labels:  map[string]string{"job": "lpu-node", "namespace": "kube-system", "pod": "lpu-node-x7k2p", "container": "lpu-nri"},
		value:   2,
	},
	"LPUStrictRefusals": {
		healthy: []series{
			{`lpu_allocations_total{` + dpTarget + `,result="contiguous"}`, "0x5 1+1x35"},
			{`lpu_allocations_total{` + dpTarget + `,result="refused"}`, "0x40"},
		},
		fault: []series{
			{`lpu_allocations_total{` + dpTarget + `,result="contiguous"}`, "0x5 1+1x35"},
			{`lpu_allocations_total{` + dpTarget + `,result="refused"}`, "0x5 1x35"},
		},
		onset:  6 * time.Minute,
		labels: holder,
	},
	"LPUMetricsTargetDown": {
		healthy: []series{{`up{` + dpTarget + `}`, "1x40"}},
		fault:   []series{{`up{` + dpTarget + `}`, "1x5 0x35"}},
		onset:   6 * time.Minute,
		labels:  targetLabels(dpTarget),
	},
	"LPUMetricsAbsent": {
		healthy: []series{{`up{` + nriTarget + `}`, "1x40"}},
		// the target is gone after minute 5; its last sample stays in
		// the 5 m lookback through minute 10
		fault:  []series{{`up{` + nriTarget + `}`, "1x5"}},
		onset:  11 * time.Minute,
		labels: map[string]string{"job": "lpu-node", "container": "lpu-nri"},
	},
	"LPUUninjectedAllocations": {
		healthy: []series{{`lpu_nri_uninjected_allocations{` + nriTarget + `}`, "0x40"}},
		fault:   []series{{`lpu_nri_uninjected_allocations{` + nriTarget + `}`, "0x5 1x35"}},
		onset:   6 * time.Minute,
		labels:  targetLabels(nriTarget),
		value:   1,
	},
	"LPUClaimPrepareRefusals": {
		healthy: []series{{`lpu_dra_prepare_refusals_total{` + draTarget + `,node="node-a",reason="held"}`, "0x40"}},
		// the kubelet retrying a refused claim once a minute
		fault:  []series{{`lpu_dra_prepare_refusals_total{` + draTarget + `,node="node-a",reason="held"}`, "0x5 1+1x35"}},
		onset:  6 * time.Minute,
		labels: map[string]string{"namespace": "kube-system", "pod": "lpu-node-dra-q8m4z", "node": "node-a", "reason": "held"},
	},
	"LPUClaimStalePreparation": {
		healthy: []series{{`lpu_dra_stale_preparations_total{` + draTarget + `,node="node-a"}`, "0x40"}},
		fault:   []series{{`lpu_dra_stale_preparations_total{` + draTarget + `,node="node-a"}`, "0x5 1x35"}},
		onset:   6 * time.Minute,
		labels:  targetLabels(draTarget, "node", "node-a"),
	},
	"LPUHeldByDevicePluginPods": {
		healthy: []series{{`lpu_dra_device_plugin_held_lpus{` + draTarget + `,node="node-a"}`, "0x40"}},
		// held past the rule's six hours
		fault:  []series{{`lpu_dra_device_plugin_held_lpus{` + draTarget + `,node="node-a"}`, "0x5 2x400"}},
		onset:  6 * time.Minute,
		labels: targetLabels(draTarget, "node", "node-a"),
		value:  2,
	},
	"LPUTemperatureHigh": {
		healthy: []series{{`lpu_temperature_celsius{` + dpTarget + `,node="node-a",device="lpu5"}`, "45x40"}},
		fault:   []series{{`lpu_temperature_celsius{` + dpTarget + `,node="node-a",device="lpu5"}`, "45x5 91x35"}},
		onset:   6 * time.Minute,
		labels:  targetLabels(dpTarget, "node", "node-a", "device", "lpu5"),
		value:   91,
	},
	"LPUTemperatureCritical": {
		healthy: []series{{`lpu_temperature_celsius{` + dpTarget + `,node="node-a",device="lpu6"}`, "45x40"}},
		fault:   []series{{`lpu_temperature_celsius{` + dpTarget + `,node="node-a",device="lpu6"}`, "45x5 97x35"}},
		onset:   6 * time.Minute,
		labels:  targetLabels(dpTarget, "node", "node-a", "device", "lpu6"),
		value:   97,
	},
}

// promParser is the PromQL parser Prometheus itself uses.
var promParser = parser.NewParser(parser.Options{})

// parseRules parses a rule file as Prometheus loads it.
func parseRules(t *testing.T, where string, content []byte) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", where, errs)
	}
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				rules = append(rules, r)
			}
		}
	}
	return rules
}

// expandAnnotations expands a rule's annotations for an alert with labels
// and value, as Prometheus' rule manager does.
func expandAnnotations(t *testing.T, r rulefmt.Rule, labels map[string]string, value float64) map[string]string {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(labels, nil, "", promql.Sample{F: value})
	out := map[string]string{}
	for k, text := range r.Annotations {
		e := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+r.Alert, data, 0, nil, nil, nil)
		s, err := e.Expand()
		if err != nil {
			t.Fatalf("alert %s annotation %s: %v", r.Alert, k, err)
		}
		out[k] = s
	}
	return out
}

// promtoolTest is a promtool unit test group.
type promtoolTest struct {
	Name        string      `json:"name"`
	Interval    string      `json:"interval"`
	InputSeries []series    `json:"input_series"`
	AlertTests  []alertTest `json:"alert_rule_test"`
}

type alertTest struct {
	EvalTime  string     `json:"eval_time"`
	Alertname string     `json:"alertname"`
	ExpAlerts []expAlert `json:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `json:"exp_labels"`
	ExpAnnotations map[string]string `json:"exp_annotations"`
}

// minutes formats d as promtool's duration.
func minutes(d time.Duration) string { return fmt.Sprintf("%dm", int(d/time.Minute)) }

// faultTest is the group for one alert's fault: nothing fires up to one
// interval before onset+for (the alert is at most pending), and the alert
// fires at onset+for with its labels and annotations.
func faultTest(t *testing.T, r rulefmt.Rule, c alertCase) promtoolTest {
	t.Helper()
	labels := maps.Clone(c.labels)
	maps.Copy(labels, r.Labels)
	fire := c.onset + time.Duration(r.For)
	return promtoolTest{
		Name: r.Alert + " fires on its fault", Interval: "1m", InputSeries: c.fault,
		AlertTests: []alertTest{
			{EvalTime: minutes(fire - time.Minute), Alertname: r.Alert, ExpAlerts: []expAlert{}},
			{EvalTime: minutes(fire), Alertname: r.Alert, ExpAlerts: []expAlert{{
				ExpLabels: labels, ExpAnnotations: expandAnnotations(t, r, c.labels, c.value),
			}}},
		},
	}
}

// healthyTest is the group for a healthy node: every case's healthy series
// together, and no alert fires at any of a few times across the run.
func healthyTest(rules []rulefmt.Rule) promtoolTest {
	g := promtoolTest{Name: "a healthy node raises nothing", Interval: "1m"}
	for _, r := range rules {
		g.InputSeries = append(g.InputSeries, alertCases[r.Alert].healthy...)
		for _, at := range []string{"5m", "20m", "40m"} {
			g.AlertTests = append(g.AlertTests, alertTest{EvalTime: at, Alertname: r.Alert, ExpAlerts: []expAlert{}})
		}
	}
	return g
}

// runPromtool writes the rule file and the test file into a temporary
// directory and runs `promtool test rules`; it returns promtool's output
// and whether it passed.
func runPromtool(t *testing.T, rules []byte, tests []promtoolTest) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", rules)
	content, err := yaml.Marshal(map[string]any{
		"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m", "tests": tests,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, dir, "tests.yaml", content)
	cmd := exec.Command(promtool(t), "test", "rules", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out) + "\n--- tests.yaml\n" + string(content), err == nil
}

// TestAlertsFireOnTheirFaults: for each chart mode, every alert of the
// rendered PrometheusRule fires on its fault exactly when its `for:` has
// passed (not an interval before), and a healthy node raises none of them;
// promtool (the distribution's 2.42) evaluates the rules.
func TestAlertsFireOnTheirFaults(t *testing.T) {
	promtool(t)
	for _, mode := range []string{modeDevicePlugin, modeDRA} {
		t.Run(mode, func(t *testing.T) {
			content := renderedRules(t, mode)
			rules := parseRules(t, "rendered PrometheusRule", content)
			tests := []promtoolTest{healthyTest(rules)}
			for _, r := range rules {
				c, ok := alertCases[r.Alert]
				if !ok {
					t.Fatalf("alert %s has no case in alertCases", r.Alert)
				}
				tests = append(tests, faultTest(t, r, c))
			}
			out, ok := runPromtool(t, content, tests)
			if !ok || !strings.Contains(out, "SUCCESS") {
				t.Fatalf("promtool test rules failed:\n%s", out)
			}
			t.Logf("promtool: %d alerts, %d test groups: SUCCESS", len(rules), len(tests))
		})
	}
}

// TestEveryAlertHasACase: every alert of the chart, in any mode, has a
// fault case, and every case names an alert the chart ships.
func TestEveryAlertHasACase(t *testing.T) {
	shipped := map[string]bool{}
	for _, mode := range []string{modeDevicePlugin, modeDRA} {
		for _, r := range parseRules(t, mode, renderedRules(t, mode)) {
			shipped[r.Alert] = true
			if _, ok := alertCases[r.Alert]; !ok {
				t.Errorf("alert %s (mode %s) has no promtool case in alertCases", r.Alert, mode)
			}
		}
	}
	for name := range alertCases {
		if !shipped[name] {
			t.Errorf("alertCases has %s, which the chart does not ship (have %v)", name, slices.Sorted(maps.Keys(shipped)))
		}
	}
}

// TestPromtoolCatchesAWrongExpectation: the harness can fail. A healthy
// node's series with a case's expected alert, and a fault's alert expected
// one interval early, both make promtool fail.
func TestPromtoolCatchesAWrongExpectation(t *testing.T) {
	promtool(t)
	content := renderedRules(t, modeDevicePlugin)
	rules := parseRules(t, "rendered PrometheusRule", content)
	i := slices.IndexFunc(rules, func(r rulefmt.Rule) bool { return r.Alert == "LPUDeviceUnhealthy" })
	if i < 0 {
		t.Fatal("no LPUDeviceUnhealthy in the chart")
	}
	c := alertCases["LPUDeviceUnhealthy"]
	healthy := faultTest(t, rules[i], c)
	healthy.InputSeries = c.healthy
	early := faultTest(t, rules[i], c)
	early.AlertTests[1].EvalTime = early.AlertTests[0].EvalTime
	for name, g := range map[string]promtoolTest{"healthy series": healthy, "one interval early": early} {
		if out, ok := runPromtool(t, content, []promtoolTest{g}); ok {
			t.Errorf("%s: promtool passed a wrong expectation:\n%s", name, out)
		}
	}
}
