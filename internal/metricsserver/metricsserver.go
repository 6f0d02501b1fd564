package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the HTTP server.
const (
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout = 5 * time.Second
	// ShutdownTimeout bounds the graceful shutdown when the context ends:
	// Serve returns after it even while requests are still running.
	ShutdownTimeout = 2 * time.Second
)

// Check is a probe condition: nil while it holds, else why not.
type Check func() error

// Handler serves /metrics from g, and /healthz and /readyz: each probe
// answers 200 "ok" while its check passes (a nil check always passes), else
// 503 with the check's error as the body.
func Handler(g prometheus.Gatherer, healthz, readyz Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", probe(healthz))
	mux.HandleFunc("/readyz", probe(readyz))
	return mux
}

func probe(c Check) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if c != nil {
			if err := c(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}

// Serve listens on addr (HOST:PORT) and serves h until ctx ends, then
// shuts the server down. An empty addr disables the endpoint: Serve then
// just waits for ctx. It returns nil after ctx ends, and an error when the
// address cannot be listened on or the server fails.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, log)
}

// ServeListener is Serve on an open listener, which it closes (tests use
// 127.0.0.1:0). A nil log logs nothing.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if log != nil {
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("metrics serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("metrics shutdown: %w", err)
		}
		return nil
	}
}
