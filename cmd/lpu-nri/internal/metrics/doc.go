// Package metrics owns lpu-nri's Prometheus collectors, in their own
// registry, and the HTTP endpoint serving /metrics, /healthz and /readyz.
//
//	m := metrics.New()
//	m.Injections.Inc()
//	go m.Serve(ctx, "127.0.0.1:9465", func() bool { return connected.Load() }, log)
package metrics
