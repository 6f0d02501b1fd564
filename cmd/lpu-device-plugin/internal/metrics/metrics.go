package metrics

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics"
)

// Results are the plugin's allocation results, the values of
// lpu_allocations_total{result}.
var Results = []string{plugin.ResultContiguous, plugin.ResultNonContiguous, plugin.ResultRefused}

// Options configure the device collector.
type Options struct {
	// Node labels every per-device series.
	Node string
	// Devices, Telemetry: where the device series come from at scrape time.
	Devices   devicemetrics.Snapshotter
	Telemetry devicemetrics.TelemetryReader
	// Holders labels telemetry with the holding pod and gives
	// lpu_device_allocated; nil leaves the labels empty and that series
	// out.
	Holders devicemetrics.HolderLister
	// HoldersTimeout bounds one Holders call per scrape; default 500ms.
	HoldersTimeout time.Duration
	// Logger receives scrape problems once per change.
	Logger *slog.Logger
	// Version is the build version lpu_build_info reports.
	Version string
}

// Metrics is lpu-device-plugin's Prometheus registry: counters and
// histograms the plugin records into (it implements plugin.Recorder), the
// node-level series of devicemetrics and the holder gauges, read at scrape
// time.
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
		newHolderCollector(opts),
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

var (
	descArc = prometheus.NewDesc("lpu_largest_free_arc",
		"Longest run of healthy, unallocated ring neighbours per ring (allocations from the kubelet's PodResources; all healthy devices count as free when it is unavailable).",
		[]string{"node", "ring"}, nil)
	descAllocated = prometheus.NewDesc("lpu_device_allocated",
		"1 while a container holds the device (kubelet PodResources), else 0; absent while PodResources is unavailable.", []string{"node", "device"}, nil)
)

// holderCollector adds the series that need the kubelet's holders to the
// node-level ones, from one reading (one PodResources List) per scrape.
type holderCollector struct {
	node    string
	devices *devicemetrics.Collector
}

func newHolderCollector(opts Options) *holderCollector {
	return &holderCollector{node: opts.Node, devices: devicemetrics.New(devicemetrics.Options{
		Node: opts.Node, Daemon: "lpu-device-plugin", Version: opts.Version,
		Devices: opts.Devices, Telemetry: opts.Telemetry, Holders: opts.Holders,
		HoldersTimeout: opts.HoldersTimeout, Logger: opts.Logger,
	})}
}

// Describe sends the descriptors.
func (c *holderCollector) Describe(ch chan<- *prometheus.Desc) {
	c.devices.Describe(ch)
	ch <- descArc
	ch <- descAllocated
}

// Collect emits the node-level series, then lpu_device_allocated and
// lpu_largest_free_arc from the same reading.
func (c *holderCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.devices.Read()
	c.devices.Emit(r, ch)
	if r.Snapshot.Inventory == nil {
		return
	}
	var free []string
	for _, d := range r.Snapshot.Inventory.Devices {
		_, held := r.Holders[d.ID]
		if d.Health.Healthy && !held {
			free = append(free, d.ID)
		}
		if r.Holders != nil {
			ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, boolValue(held), c.node, d.ID)
		}
	}
	if r.Snapshot.Layout != nil {
		for ring, n := range r.Snapshot.Layout.LargestFreeArc(free) {
			ch <- prometheus.MustNewConstMetric(descArc, prometheus.GaugeValue, float64(n), c.node, strconv.Itoa(ring))
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
