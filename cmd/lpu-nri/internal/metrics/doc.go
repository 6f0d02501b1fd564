// Package metrics owns lpu-nri's Prometheus collectors, in their own
// registry; internal/metricsserver serves it with the probes.
//
//	m := metrics.New()
//	m.Injections.Inc()
//	h := metricsserver.Handler(m.Registry, nil, pl.Live) // pl: the NRI plugin
//	go metricsserver.Serve(ctx, "127.0.0.1:9465", h, log)
package metrics
