package startup

import (
	"context"
	"log/slog"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// TracingFlushTimeout bounds the final flush of spans when a daemon stops:
// a collector that is gone must not hold up a SIGTERM.
const TracingFlushTimeout = time.Second

// Tracing starts tracing as c says (trace.Setup) for service at version
// and returns the daemons' tracer (trace.ScopeName) and the stop function
// to defer. It fails open: a malformed endpoint or an exporter that cannot
// be built is logged ("tracing disabled") and yields a tracer that records
// nothing. stop flushes pending spans within TracingFlushTimeout and logs
// a failure.
func Tracing(ctx context.Context, c config.Tracing, service, version string, log *slog.Logger) (tracer oteltrace.Tracer, stop func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tp, shutdown, err := trace.Setup(ctx, trace.Config{
		Endpoint: c.Endpoint, Insecure: c.Insecure,
		ServiceName: service, ServiceVersion: version,
	}, log)
	if err != nil {
		log.Warn("tracing disabled", "err", err)
	}
	return tp.Tracer(trace.ScopeName), func() {
		sctx, cancel := context.WithTimeout(context.Background(), TracingFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}
}
