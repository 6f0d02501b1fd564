package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// procUsage is one process's CPU time and resident memory.
type procUsage struct {
	CPUSeconds float64
	RSSMiB     float64
}

// readProc reads utime+stime from /proc/PID/stat (USER_HZ is 100 on Linux)
// and VmRSS from /proc/PID/status.
func readProc(pid int) (procUsage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	// The command name is in parentheses and may hold spaces.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	u := procUsage{CPUSeconds: (ut + st) / 100}
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			u.RSSMiB = kb / 1024
		}
	}
	return u, nil
}

// securePort reads a component's --secure-port from its command line.
func securePort(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/cmdline: %w", pid, err)
	}
	args := strings.Split(string(b), "\x00")
	port := 0
	for i, a := range args {
		if a == "--secure-port" && i+1 < len(args) {
			port, _ = strconv.Atoi(args[i+1])
		} else if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
			port, _ = strconv.Atoi(v)
		}
	}
	if port == 0 {
		return 0, fmt.Errorf("pid %d: no --secure-port", pid)
	}
	return port, nil
}

// scraper reads kube-scheduler's own /metrics with the admin's client
// certificate (authorised by the API server, as for any user); the
// scheduler's serving certificate is self-signed, so it is not verified.
type scraper struct {
	url    string // …/metrics
	client *http.Client
}

func newScraper(admin *rest.Config, port int) (*scraper, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Insecure, cfg.CAData, cfg.CAFile = true, nil, ""
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("scheduler metrics transport: %w", err)
	}
	return &scraper{url: fmt.Sprintf("https://127.0.0.1:%d/metrics", port), client: &http.Client{Transport: tr}}, nil
}

// schedMetrics is what is kept of one scrape.
type schedMetrics struct {
	scheduled float64             // scheduler_schedule_attempts_total{result="scheduled"}
	attempts  float64             // every result
	buckets   map[float64]float64 // scheduler_scheduling_attempt_duration_seconds, cumulative
}

func (s *scraper) scrape(ctx context.Context) (schedMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return schedMetrics{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return schedMetrics{}, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return schedMetrics{}, fmt.Errorf("scrape %s: %s %q", s.url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return schedMetrics{}, fmt.Errorf("parse %s: %w", s.url, err)
	}
	m := schedMetrics{buckets: map[float64]float64{}}
	if f := fams["scheduler_schedule_attempts_total"]; f != nil {
		for _, x := range f.Metric {
			v := x.GetCounter().GetValue()
			m.attempts += v
			if label(x, "result") == "scheduled" {
				m.scheduled += v
			}
		}
	}
	if f := fams["scheduler_scheduling_attempt_duration_seconds"]; f != nil {
		for _, x := range f.Metric {
			for _, b := range x.GetHistogram().GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue // the parser may list +Inf; the sample count below is it
				}
				m.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
			m.buckets[math.Inf(1)] += float64(x.GetHistogram().GetSampleCount())
		}
	}
	return m, nil
}

// profile writes a CPU profile of the scheduler over the next d to path
// (the scheduler runs with --profiling when the harness has -profile).
func (s *scraper) profile(ctx context.Context, d time.Duration, path string) error {
	u := strings.TrimSuffix(s.url, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("profile %s: %s %q", u, resp.Status, b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("profile %s: %w", u, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile estimates the q-quantile of the histogram difference b−a by
// linear interpolation within the bucket, as histogram_quantile does.
func quantile(a, b schedMetrics, q float64) float64 {
	bounds := make([]float64, 0, len(b.buckets))
	for ub := range b.buckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return math.NaN()
	}
	total := b.buckets[math.Inf(1)] - a.buckets[math.Inf(1)]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	prevUB, prevC := 0.0, 0.0
	for _, ub := range bounds {
		c := b.buckets[ub] - a.buckets[ub]
		if c >= rank {
			if math.IsInf(ub, 1) {
				return prevUB
			}
			if c == prevC {
				return ub
			}
			return prevUB + (ub-prevUB)*(rank-prevC)/(c-prevC)
		}
		prevUB, prevC = ub, c
	}
	return prevUB
}
