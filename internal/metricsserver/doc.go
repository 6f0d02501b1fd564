// Package metricsserver serves a daemon's Prometheus registry over HTTP
// with its liveness and readiness probes, and owns the listener's life:
// listen, serve, shut down when the context ends. The metrics themselves
// stay with each daemon.
//
// The server bounds what a client can hold (the port is reachable from
// pods): read, write and idle timeouts, a header size limit, no request
// bodies (a request announcing one is answered 413 and its connection
// closed at once, so it holds no slot past its answer), and at most
// MaxConns open connections shared fairly by source address: a newcomer
// takes the slot of a silent connection, or of the source holding the
// most slots, and is closed at once only when its own source holds the
// most.
//
// Endpoints:
//
//	/metrics  the registry, in the Prometheus text or protobuf format
//	/healthz  200 "ok" while the health check passes, else 503 and why
//	/readyz   200 "ok" while the readiness check passes, else 503 and why
//
// Example:
//
//	h := metricsserver.Handler(reg, nil, func() error {
//		if !synced.Load() {
//			return errors.New("not synchronized yet")
//		}
//		return nil
//	})
//	err := metricsserver.Serve(ctx, "127.0.0.1:9465", h, log) // "" waits for ctx
package metricsserver
