package metrics

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/logchange"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Results are the plugin's allocation results, the values of
// lpu_allocations_total{result}.
var Results = []string{plugin.ResultContiguous, plugin.ResultNonContiguous, plugin.ResultRefused}

// Snapshotter gives the current devices; *health.Monitor implements it.
type Snapshotter interface {
	Snapshot() (health.Snapshot, <-chan struct{})
}

// TelemetryReader reads one device's telemetry; *device.Sysfs implements it.
type TelemetryReader interface {
	Telemetry(id string) (device.Telemetry, error)
}

// HolderLister says which container holds each device; *PodResources
// implements it. A nil map with an error means "unknown".
type HolderLister interface {
	Holders(ctx context.Context) (map[string]podresources.Holder, error)
}

// Options configure the device collector.
type Options struct {
	// Node labels every per-device series.
	Node string
	// Devices, Telemetry: where the device series come from at scrape time.
	Devices   Snapshotter
	Telemetry TelemetryReader
	// Holders labels telemetry with the holding pod; nil leaves the
	// labels empty.
	Holders HolderLister
	// HoldersTimeout bounds one Holders call per scrape; default 500ms.
	HoldersTimeout time.Duration
	// Logger receives scrape problems once per change.
	Logger *slog.Logger
	// Version is the build version lpu_build_info reports.
	Version string
}

// Metrics is lpu-device-plugin's Prometheus registry: counters and
// histograms the plugin records into (it implements plugin.Recorder), and
// per-device gauges read at scrape time.
type Metrics struct {
	// Registry holds every collector (and the Go and process collectors).
	Registry *prometheus.Registry

	allocations   *prometheus.CounterVec
	preferred     prometheus.Histogram
	allocate      prometheus.Histogram
	registrations prometheus.Counter
}

var _ plugin.Recorder = (*Metrics)(nil)

// New returns the metrics registered in a fresh registry.
func New(opts Options) *Metrics {
	buckets := prometheus.ExponentialBuckets(10e-6, 4, 9) // 10µs .. ~0.65s
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpu_allocations_total",
			Help: "Container allocations checked by Allocate, by result: contiguous (one ring arc), noncontiguous (accepted under best-effort), refused.",
		}, []string{"result"}),
		preferred: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lpu_preferred_allocation_duration_seconds",
			Help:    "Time to answer one GetPreferredAllocation call.",
			Buckets: buckets,
		}),
		allocate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lpu_allocate_duration_seconds",
			Help:    "Time to answer one Allocate call.",
			Buckets: buckets,
		}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_registrations_total",
			Help: "Successful registrations with the kubelet (1 + re-registrations).",
		}),
	}
	for _, r := range Results {
		m.allocations.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.allocations, m.preferred, m.allocate, m.registrations,
		newDeviceCollector(opts),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Allocation counts one container allocation with its result.
func (m *Metrics) Allocation(result string) { m.allocations.WithLabelValues(result).Inc() }

// PreferredDuration records one GetPreferredAllocation call.
func (m *Metrics) PreferredDuration(d time.Duration) { m.preferred.Observe(d.Seconds()) }

// AllocateDuration records one Allocate call.
func (m *Metrics) AllocateDuration(d time.Duration) { m.allocate.Observe(d.Seconds()) }

// Registered counts one successful registration.
func (m *Metrics) Registered() { m.registrations.Inc() }

// Check is a health condition: nil when it holds, else why not.
type Check = metricsserver.Check

// Handler serves /metrics, /healthz and /readyz: each probe answers 200
// "ok" while its check passes, else 503 with the reason.
func (m *Metrics) Handler(healthz, readyz Check) http.Handler {
	return metricsserver.Handler(m.Registry, healthz, readyz)
}

// Serve listens on addr and serves Handler until ctx ends. An empty addr
// disables the endpoint: Serve then waits for ctx.
func (m *Metrics) Serve(ctx context.Context, addr string, healthz, readyz Check, log *slog.Logger) error {
	return metricsserver.Serve(ctx, addr, m.Handler(healthz, readyz), log)
}

// ServeListener is Serve on an open listener (tests use 127.0.0.1:0).
func (m *Metrics) ServeListener(ctx context.Context, ln net.Listener, healthz, readyz Check, log *slog.Logger) error {
	return metricsserver.ServeListener(ctx, ln, m.Handler(healthz, readyz), log)
}

var (
	deviceLabels    = []string{"node", "device"}
	telemetryLabels = []string{"node", "device", "pod", "namespace", "container"}

	descHealthy = prometheus.NewDesc("lpu_device_healthy",
		"1 when the device is reported Healthy to the kubelet, else 0.", deviceLabels, nil)
	descUtil = prometheus.NewDesc("lpu_utilization_percent",
		"Device utilization from sysfs, percent.", telemetryLabels, nil)
	descMemUsed = prometheus.NewDesc("lpu_memory_used_bytes",
		"Device memory in use from sysfs, bytes.", telemetryLabels, nil)
	descMemTotal = prometheus.NewDesc("lpu_memory_total_bytes",
		"Device memory size from sysfs, bytes.", telemetryLabels, nil)
	descTemp = prometheus.NewDesc("lpu_temperature_celsius",
		"Device temperature from sysfs, degrees Celsius.", telemetryLabels, nil)
	descPower = prometheus.NewDesc("lpu_power_watts",
		"Device power draw from sysfs, watts.", telemetryLabels, nil)
	descArc = prometheus.NewDesc("lpu_largest_free_arc",
		"Longest run of healthy, unallocated ring neighbours per ring (allocations from the kubelet's PodResources; all healthy devices count as free when it is unavailable).",
		[]string{"node", "ring"}, nil)
	descAllocated = prometheus.NewDesc("lpu_device_allocated",
		"1 while a container holds the device (kubelet PodResources), else 0; absent while PodResources is unavailable.", deviceLabels, nil)
	descInfo = prometheus.NewDesc("lpu_device_info",
		"Always 1; the labels carry the device's model, firmware and driver versions.", []string{"node", "device", "model", "firmware", "driver"}, nil)
	descBuild = prometheus.NewDesc("lpu_build_info",
		"Always 1; the labels carry the daemon's build version and Go version.", []string{"daemon", "version", "goversion"}, nil)
)

// deviceCollector reads device state and telemetry at scrape time.
type deviceCollector struct {
	opts Options
	log  *slog.Logger

	mu   sync.Mutex
	errs map[string]*logchange.Errors // per source, to log changes only
}

func newDeviceCollector(opts Options) *deviceCollector {
	if opts.HoldersTimeout <= 0 {
		opts.HoldersTimeout = 500 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &deviceCollector{opts: opts, log: log, errs: map[string]*logchange.Errors{}}
}

// Describe sends the descriptors.
func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHealthy, descUtil, descMemUsed, descMemTotal, descTemp, descPower, descArc, descAllocated, descInfo, descBuild} {
		ch <- d
	}
}

// note logs a problem of source once per change (and its recovery).
func (c *deviceCollector) note(source string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := c.errs[source]
	if errs == nil {
		errs = &logchange.Errors{}
		c.errs[source] = errs
	}
	switch errs.Note(err) {
	case logchange.Failed:
		c.log.Warn("metrics source unavailable", "source", source, "err", err)
	case logchange.Recovered:
		c.log.Info("metrics source available again", "source", source)
	}
}

// Collect reads the snapshot, the holders (one PodResources List) and each
// device's telemetry.
func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, "lpu-device-plugin", c.opts.Version, runtime.Version())
	if c.opts.Devices == nil {
		return
	}
	snap, _ := c.opts.Devices.Snapshot()
	var holders map[string]podresources.Holder
	if c.opts.Holders != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.HoldersTimeout)
		h, err := c.opts.Holders.Holders(ctx)
		cancel()
		c.note("podresources", err)
		holders = h
	}
	node := c.opts.Node
	var free []string
	for _, d := range snap.Inventory.Devices {
		healthy := 0.0
		if d.Health.Healthy {
			healthy = 1
			if _, held := holders[d.ID]; !held {
				free = append(free, d.ID)
			}
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, node, d.ID)
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, node, d.ID, d.Model, d.Firmware, snap.Inventory.DriverVersion)
		if holders != nil {
			held := 0.0
			if _, ok := holders[d.ID]; ok {
				held = 1
			}
			ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, held, node, d.ID)
		}
		if c.opts.Telemetry == nil {
			continue
		}
		t, err := c.opts.Telemetry.Telemetry(d.ID)
		c.note("telemetry "+d.ID, err)
		if err != nil {
			continue // a partly read set would report wrong zeros
		}
		h := holders[d.ID]
		labels := []string{node, d.ID, h.Pod, h.Namespace, h.Container}
		for _, v := range []struct {
			desc  *prometheus.Desc
			file  string
			value float64
		}{
			{descUtil, device.AttrUtilization, t.UtilizationPercent},
			{descMemUsed, device.AttrMemoryUsed, float64(t.MemoryUsedBytes)},
			{descMemTotal, device.AttrMemoryTotal, float64(t.MemoryTotalBytes)},
			{descTemp, device.AttrTemperature, t.TemperatureCelsius},
			{descPower, device.AttrPower, t.PowerWatts},
		} {
			if !slices.Contains(t.Missing, v.file) {
				ch <- prometheus.MustNewConstMetric(v.desc, prometheus.GaugeValue, v.value, labels...)
			}
		}
	}
	if snap.Layout != nil {
		for r, n := range snap.Layout.LargestFreeArc(free) {
			ch <- prometheus.MustNewConstMetric(descArc, prometheus.GaugeValue, float64(n), node, strconv.Itoa(r))
		}
	}
}
