package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics"
)

// Metrics holds lpu-nri's collectors in their own registry.
type Metrics struct {
	Registry *prometheus.Registry

	CreateDuration prometheus.Histogram   // lpu_nri_create_container_duration_seconds
	Injections     prometheus.Counter     // lpu_nri_injections_total
	Refusals       *prometheus.CounterVec // lpu_nri_refusals_total{reason}
	Connected      prometheus.Gauge       // lpu_nri_connected
	Unallocated    prometheus.Gauge       // lpu_nri_unallocated_holders
	// UnallocatedFound counts containers found holding LPU nodes without
	// an allocation (each once); lpu_nri_unallocated_holders_found_total.
	UnallocatedFound prometheus.Counter
	Uninjected       prometheus.Gauge     // lpu_nri_uninjected_allocations
	UninjectedFound  prometheus.Counter   // lpu_nri_uninjected_allocations_found_total
	Reconnects       prometheus.Counter   // lpu_nri_connections_total
	SpecWrites       prometheus.Counter   // lpu_nri_cdi_spec_writes_total
	Rescans          prometheus.Counter   // lpu_nri_cdi_rescans_total
	Build            *prometheus.GaugeVec // lpu_build_info{daemon,version,goversion}, set once at start

	// LedgerFull counts new allocation IDs refused because the replay
	// ledger holds only IDs of running pods; lpu_nri_ledger_full_total.
	LedgerFull prometheus.Counter
	// LedgerShare counts new allocation IDs refused because their pod or
	// namespace holds its share of the ledger;
	// lpu_nri_ledger_share_refused_total.
	LedgerShare prometheus.Counter
}

// New returns the collectors registered in a fresh registry, with the Go
// and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		CreateDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lpu_nri_create_container_duration_seconds",
			Help: "Time lpu-nri spends deciding one CreateContainer request (excluding socket I/O).",
			// 5µs .. ~1.3s: the decision is tens of microseconds, a
			// PodResources cross-check adds a socket round trip.
			Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10),
		}),
		Injections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_injections_total",
			Help: "Containers that received LPU devices from a verified allocation.",
		}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpu_nri_refusals_total",
			Help: "Containers whose creation lpu-nri refused, by reason.",
		}, []string{"reason"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpu_nri_connected",
			Help: "1 while lpu-nri is registered with and synchronized by the container runtime.",
		}),
		Unallocated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpu_nri_unallocated_holders",
			Help: "Running containers holding LPU device nodes without a valid allocation, at the last audit.",
		}),
		UnallocatedFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_unallocated_holders_found_total",
			Help: "Containers the audit found holding LPU device nodes without a valid allocation (each counted once).",
		}),
		Uninjected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpu_nri_uninjected_allocations",
			Help: "Running containers with a verified allocation whose LPU device nodes they do not hold, at the last audit.",
		}),
		UninjectedFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_uninjected_allocations_found_total",
			Help: "Containers the audit found running without the LPUs they were allocated (each counted once).",
		}),
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_connections_total",
			Help: "Successful registrations with the container runtime (1 + reconnects).",
		}),
		SpecWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_cdi_spec_writes_total",
			Help: "CDI spec files written because the inventory or driver version changed (CDI mode).",
		}),
		Rescans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpu_nri_cdi_rescans_total",
			Help: "Rescans of the node for the CDI spec, whether or not they rewrote it (CDI mode; one per resync interval while the loop is alive).",
		}),
	}
	m.LedgerFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lpu_nri_ledger_full_total",
		Help: "New allocation IDs refused because the replay ledger is full of running pods' IDs (each also a refusal with reason replayed).",
	})
	m.Build = devicemetrics.NewBuildInfo() // the same gauge as the allocators'
	for _, r := range verify.Reasons {
		m.Refusals.WithLabelValues(r)
	}
	m.LedgerShare = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lpu_nri_ledger_share_refused_total",
		Help: "New allocation IDs refused because their pod or namespace holds its share of the replay ledger (each also a refusal with reason replayed).",
	})
	m.Registry.MustRegister(m.LedgerFull, m.LedgerShare)
	m.Registry.MustRegister(m.CreateDuration, m.Injections, m.Refusals, m.Connected,
		m.Unallocated, m.UnallocatedFound, m.Uninjected, m.UninjectedFound, m.Reconnects, m.SpecWrites, m.Rescans, m.Build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ledgerIDs is lpu_nri_ledger_ids{namespace}, read from the ledger at
// each scrape: which namespaces hold the replay ledger.
type ledgerIDs struct {
	desc *prometheus.Desc
	read func() map[string]int
}

func (c ledgerIDs) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c ledgerIDs) Collect(ch chan<- prometheus.Metric) {
	for ns, n := range c.read() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), ns)
	}
}

// WatchLedger registers lpu_nri_ledger_ids{namespace}, the allocation IDs
// each namespace holds in the replay ledger, read by perNamespace at each
// scrape ("" for records written before namespaces were kept).
func (m *Metrics) WatchLedger(perNamespace func() map[string]int) {
	m.Registry.MustRegister(ledgerIDs{
		desc: prometheus.NewDesc("lpu_nri_ledger_ids", "Allocation IDs each namespace holds in the replay ledger (at most a quarter of its 4096 each).", []string{"namespace"}, nil),
		read: perNamespace,
	})
}
