package driver

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
)

// Metrics are lpu-dra's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	Registry    *prometheus.Registry
	prepared    prometheus.Gauge
	prepare     prometheus.Histogram
	unprepare   prometheus.Histogram
	refusals    *prometheus.CounterVec
	republishes prometheus.Counter
	stale       prometheus.Counter
	dpHeld      prometheus.Gauge
	countClaims *prometheus.CounterVec
	constLabels prometheus.Labels
}

// Metric names, for docs and tests.
const (
	MetricPreparedClaims   = "lpu_dra_prepared_claims"
	MetricPrepareSeconds   = "lpu_dra_prepare_duration_seconds"
	MetricUnprepareSeconds = "lpu_dra_unprepare_duration_seconds"
	MetricRefusals         = "lpu_dra_prepare_refusals_total"
	MetricRepublishes      = "lpu_dra_republishes_total"
	MetricStale            = "lpu_dra_stale_preparations_total"
	MetricDevicePluginHeld = "lpu_dra_device_plugin_held_lpus"
	MetricNodeLabels       = "lpu_dra_node_labels_kept"
	MetricNodeLabelWrites  = "lpu_dra_node_label_writes_total"
	MetricCountClaims      = "lpu_dra_count_claims_total"
)

// NewMetrics registers the metrics, with the Go and process collectors,
// on a new registry.
func NewMetrics(node string) *Metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": node}
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms … 4 s
	m := &Metrics{
		Registry: reg, constLabels: labels,
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricPreparedClaims,
			Help: "Claims this driver has prepared and not yet unprepared.", ConstLabels: labels}),
		prepare: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricPrepareSeconds,
			Help: "Time to prepare one claim (CDI spec and checkpoint written), seconds.", Buckets: buckets, ConstLabels: labels}),
		unprepare: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricUnprepareSeconds,
			Help: "Time to unprepare one claim, seconds.", Buckets: buckets, ConstLabels: labels}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefusals,
			Help: "Claims refused by Prepare, by reason.", ConstLabels: labels}, []string{"reason"}),
		republishes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricRepublishes,
			Help: "ResourceSlice publications handed to the kubelet plugin helper.", ConstLabels: labels}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricStale,
			Help: "Times a prepared claim's apiserver allocation differed from its preparation (re-allocated while a stale preparation stayed): its pods were not admitted.", ConstLabels: labels}),
		dpHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricDevicePluginHeld,
			Help: "LPUs the kubelet's PodResources shows held by device-plugin pods (a node moved to DRA while they run): not published, refused by Prepare.", ConstLabels: labels}),
	}
	m.countClaims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCountClaims,
		Help: "Claims of count devices (a pod's plain hyperaccel.ai/lpu: k) prepared, by shape: arc (k ring neighbours) or scattered (no k free neighbours in the order the scheduler saw).", ConstLabels: labels}, []string{"shape"})
	m.countClaims.WithLabelValues("arc")
	m.countClaims.WithLabelValues("scattered")
	for _, r := range []string{state.ReasonForeignPool, state.ReasonBadDevice, state.ReasonUnhealthy, state.ReasonHeld, state.ReasonNotReady, state.ReasonWrite, state.ReasonChanged, ReasonConfig, ReasonForeignPod, ReasonClass} {
		m.refusals.WithLabelValues(r)
	}
	reg.MustRegister(m.prepared, m.prepare, m.unprepare, m.refusals, m.republishes, m.stale, m.dpHeld, m.countClaims,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) setPrepared(n int) {
	if m != nil {
		m.prepared.Set(float64(n))
	}
}

func (m *Metrics) observePrepare(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.prepare.Observe(d.Seconds())
	if err != nil {
		reason := state.ReasonBadDevice
		var r *state.Refusal
		if errors.As(err, &r) {
			reason = r.Reason
		}
		m.refusals.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) observeUnprepare(d time.Duration) {
	if m != nil {
		m.unprepare.Observe(d.Seconds())
	}
}

func (m *Metrics) setDevicePluginHeld(n int) {
	if m != nil {
		m.dpHeld.Set(float64(n))
	}
}

func (m *Metrics) republished() {
	if m != nil {
		m.republishes.Inc()
	}
}

func (m *Metrics) countClaim(shape string) {
	if m != nil {
		m.countClaims.WithLabelValues(shape).Inc()
	}
}

func (m *Metrics) stalePreparation() {
	if m != nil {
		m.stale.Inc()
	}
}

// NodeLabelKeeper is what the node-label metrics read (nodelabel.Keeper).
type NodeLabelKeeper interface {
	Disabled() error
	Writes() int
}

// WatchNodeLabels registers the node-label metrics of k: kept is 1 while
// k writes the Node's prefilter labels and 0 once the API server refused
// it; a nil k (config dra.nodeLabels: false) reports 0.
func (m *Metrics) WatchNodeLabels(k NodeLabelKeeper) {
	if m == nil {
		return
	}
	labels := m.constLabels
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricNodeLabels, ConstLabels: labels,
			Help: "1 while lpu-dra keeps its Node's lpu.hyperaccel.ai/largest-free-arc and free-lpus labels (the scheduler prefilter's hint), 0 when configured off or refused by the API server (RBAC)."},
			func() float64 {
				if k == nil || k.Disabled() != nil {
					return 0
				}
				return 1
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricNodeLabelWrites, ConstLabels: labels,
			Help: "Patches of the node-label hint written to lpu-dra's Node (rises at once, falls coalesced)."},
			func() float64 {
				if k == nil {
					return 0
				}
				return float64(k.Writes())
			}))
}
