package prom

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

// target is one scrape target: a daemon's metrics address and the labels
// the ServiceMonitor's discovery gives it (namespace, pod, container).
type target struct {
	addr   string
	labels map[string]string
}

// scrapeSettings are the chart's ServiceMonitor endpoint settings the test
// Prometheus applies (its interval is not: the test scrapes every second).
type scrapeSettings struct {
	HonorLabels bool   `json:"honorLabels"`
	Path        string `json:"path"`
	Port        string `json:"port"`
}

// chartScrape renders the chart's ServiceMonitor and returns its endpoints.
func chartScrape(t *testing.T, mode string) []scrapeSettings {
	t.Helper()
	var sm struct {
		Spec struct {
			Endpoints []scrapeSettings `json:"endpoints"`
		} `json:"spec"`
	}
	out := helmTemplate(t, "templates/servicemonitor.yaml", "metrics.serviceMonitor.enabled=true", "mode="+mode)
	if err := yaml.Unmarshal(out, &sm); err != nil || len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("rendered ServiceMonitor: %v\n%s", err, out)
	}
	return sm.Spec.Endpoints
}

// promConfig is a Prometheus configuration scraping targets every second
// with the chart's settings, evaluating rules every second.
func promConfig(s scrapeSettings, rules string, targets []target) ([]byte, error) {
	var statics []map[string]any
	for _, tg := range targets {
		statics = append(statics, map[string]any{"targets": []string{tg.addr}, "labels": tg.labels})
	}
	return yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
		"rule_files": []string{rules},
		"scrape_configs": []map[string]any{{
			"job_name": "lpu-node", "honor_labels": s.HonorLabels, "metrics_path": s.Path,
			"static_configs": statics,
		}},
	})
}

// promServer is a running Prometheus on 127.0.0.1.
type promServer struct {
	base string
	p    *daemontest.Proc
}

// startPrometheus runs the distribution's prometheus with config in dir,
// listening on 127.0.0.1 only, and waits until it is ready.
func startPrometheus(t *testing.T, dir string, config []byte) *promServer {
	t.Helper()
	cfg := writeFile(t, dir, "prometheus.yml", config)
	addr := daemontest.FreeAddr(t)
	p := daemontest.Start(t, dir, "prometheus", prometheus(t), nil, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+addr,
		"--log.level=warn")
	s := &promServer{base: "http://" + addr, p: p}
	daemontest.WaitFor(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(s.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, p)
	return s
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// value is the sample's value.
func (s sample) value() float64 {
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

// api GETs path with query parameters from Prometheus' HTTP API and decodes
// its data into out.
func (s *promServer) api(path string, params url.Values, out any) error {
	resp, err := http.Get(s.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// query evaluates expr now and returns its vector.
func (s *promServer) query(t *testing.T, expr string) []sample {
	t.Helper()
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := s.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		t.Fatal(err)
	}
	if data.ResultType != "vector" {
		t.Fatalf("%s: result type %s", expr, data.ResultType)
	}
	return data.Result
}

// alert is one entry of /api/v1/alerts.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts returns the alerts Prometheus holds, pending and firing.
func (s *promServer) alerts(t *testing.T) []alert {
	t.Helper()
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	if err := s.api("/api/v1/alerts", nil, &data); err != nil {
		t.Fatal(err)
	}
	return data.Alerts
}

// series is one element of a range query's matrix.
type rangeSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// queryRange evaluates expr from start to end every step.
func (s *promServer) queryRange(t *testing.T, expr string, start, end time.Time, step time.Duration) []rangeSeries {
	t.Helper()
	var data struct {
		Result []rangeSeries `json:"result"`
	}
	params := url.Values{"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)},
		"end": {strconv.FormatInt(end.Unix()+1, 10)}, "step": {step.String()}}
	if err := s.api("/api/v1/query_range", params, &data); err != nil {
		t.Fatal(err)
	}
	return data.Result
}
