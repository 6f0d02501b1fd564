// Package metricsserver serves a daemon's Prometheus registry over HTTP
// with its liveness and readiness probes, and owns the listener's life:
// listen, serve, shut down when the context ends. The metrics themselves
// stay with each daemon.
//
// The server bounds what a client can hold (the port is reachable from
// pods): read, write and idle timeouts, a header size limit, no request
// bodies (a request announcing one is answered 413 and its connection
// closed at once, so it holds no slot past its answer), and at most
// MaxConns open connections from the pod network shared fairly by source
// address: a newcomer takes the slot of a connection answered and
// closing, else of the one quiet longest (silent, or idle past the header
// timeout), else of the source holding the most slots, and is closed at
// once only when its own source holds the most. A connection accepted
// less than AcceptGrace ago that has sent nothing yet keeps its slot
// against other sources: it had no chance to send its request. The node's
// own addresses, where the kubelet probes from (loopback, the gateways of
// the pod's network namespace, the addresses in HOST_IPS), take the shared
// slots like any source and, once those are taken, HostConns more that no
// pod can take: with more tenant sources than slots, fairness alone would
// leave some source out at any moment.
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
