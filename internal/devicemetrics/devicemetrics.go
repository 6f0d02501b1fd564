package devicemetrics

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/logchange"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Snapshotter gives the current devices; *health.Monitor implements it.
type Snapshotter interface {
	Snapshot() (health.Snapshot, <-chan struct{})
}

// TelemetryReader reads one device's telemetry; *device.Sysfs implements it.
type TelemetryReader interface {
	Telemetry(id string) (device.Telemetry, error)
}

// HolderLister says which container holds each device;
// *podresources.Client implements it. A nil map with an error means
// "unknown".
type HolderLister interface {
	Holders(ctx context.Context) (map[string]podresources.Holder, error)
}

// Options configure the collector.
type Options struct {
	// Node labels every per-device series.
	Node string
	// Daemon and Version are lpu_build_info's daemon and version labels.
	Daemon, Version string
	// Devices, Telemetry: where the device series come from at scrape
	// time; a nil Devices reports lpu_build_info only.
	Devices   Snapshotter
	Telemetry TelemetryReader
	// Holders labels telemetry with the holding pod; nil leaves the
	// labels empty.
	Holders HolderLister
	// HoldersTimeout bounds one Holders call per scrape; default 500ms.
	HoldersTimeout time.Duration
	// Logger receives scrape problems once per change.
	Logger *slog.Logger
}

// Label names of the node-level series.
var (
	deviceLabels    = []string{"node", "device"}
	telemetryLabels = []string{"node", "device", "pod", "namespace", "container"}
	buildLabels     = []string{"daemon", "version", "goversion"}
)

var (
	descHealthy = prometheus.NewDesc("lpu_device_healthy",
		"1 when the device is reported Healthy (to the kubelet, or in lpu-dra's ResourceSlices), else 0.", deviceLabels, nil)
	descInfo = prometheus.NewDesc("lpu_device_info",
		"Always 1; the labels carry the device's model, firmware and driver versions.", []string{"node", "device", "model", "firmware", "driver"}, nil)
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
)

// NewBuildInfo returns the lpu_build_info gauge, unset; a daemon sets its
// one child to 1 with its name, version and runtime.Version().
func NewBuildInfo() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lpu_build_info",
		Help: "Always 1; the labels carry the daemon's build version and Go version.",
	}, buildLabels)
}

// Collector reads the node's devices and their telemetry at scrape time.
type Collector struct {
	opts  Options
	log   *slog.Logger
	build *prometheus.GaugeVec

	mu   sync.Mutex
	errs map[string]*logchange.Errors // per source, to log changes only
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns the collector for opts.
func New(opts Options) *Collector {
	if opts.HoldersTimeout <= 0 {
		opts.HoldersTimeout = 500 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	build := NewBuildInfo()
	build.WithLabelValues(opts.Daemon, opts.Version, runtime.Version()).Set(1)
	return &Collector{opts: opts, log: log, build: build, errs: map[string]*logchange.Errors{}}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.build.Describe(ch)
	for _, d := range []*prometheus.Desc{descHealthy, descInfo, descUtil, descMemUsed, descMemTotal, descTemp, descPower} {
		ch <- d
	}
}

// Collect reads and emits the series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) { c.Emit(c.Read(), ch) }

// Reading is one scrape's view of the node: the devices and, when a
// HolderLister is set and answered, who holds them.
type Reading struct {
	// Snapshot is the devices; its Inventory is nil when Options.Devices is.
	Snapshot health.Snapshot
	// Holders maps device IDs to their holder; nil when unknown (no
	// lister, or it failed).
	Holders map[string]podresources.Holder
}

// Read takes one reading: the snapshot and one Holders call.
func (c *Collector) Read() Reading {
	var r Reading
	if c.opts.Devices == nil {
		return r
	}
	r.Snapshot, _ = c.opts.Devices.Snapshot()
	if c.opts.Holders != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.HoldersTimeout)
		h, err := c.opts.Holders.Holders(ctx)
		cancel()
		c.note("podresources", err)
		r.Holders = h
	}
	return r
}

// Emit sends the node-level series of r: build info, then health, info
// and telemetry of each device.
func (c *Collector) Emit(r Reading, ch chan<- prometheus.Metric) {
	c.build.Collect(ch)
	if r.Snapshot.Inventory == nil {
		return
	}
	node := c.opts.Node
	for _, d := range r.Snapshot.Inventory.Devices {
		healthy := 0.0
		if d.Health.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, node, d.ID)
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, node, d.ID, d.Model, d.Firmware, r.Snapshot.Inventory.DriverVersion)
		c.emitTelemetry(d.ID, r.Holders[d.ID], ch)
	}
}

// emitTelemetry sends the telemetry of one device, labelled with h; a
// file the device lacks sends no series.
func (c *Collector) emitTelemetry(id string, h podresources.Holder, ch chan<- prometheus.Metric) {
	if c.opts.Telemetry == nil {
		return
	}
	t, err := c.opts.Telemetry.Telemetry(id)
	c.note("telemetry "+id, err)
	if err != nil {
		return // a partly read set would report wrong zeros
	}
	labels := []string{c.opts.Node, id, h.Pod, h.Namespace, h.Container}
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

// note logs a problem of source once per change (and its recovery).
func (c *Collector) note(source string, err error) {
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

// Names returns the sorted names of the metric families g gathers now
