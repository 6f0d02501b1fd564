package trace

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Defaults of Config.
const (
	// DefaultServiceName is the service.name when Config.ServiceName is
	// empty. Each daemon should pass its own name.
	DefaultServiceName = "lpu-node"
	// DefaultExportTimeout bounds one export to the collector, retries
	// included.
	DefaultExportTimeout = 5 * time.Second
	// DefaultShutdownTimeout bounds the shutdown function (final flush and
	// closing the connection) when its context has no earlier deadline.
	DefaultShutdownTimeout = 5 * time.Second
)

// ScopeName is the instrumentation scope of the daemons' tracers:
// provider.Tracer(trace.ScopeName).
const ScopeName = "github.com/hyperaccel/lpu-node"

// Config says where spans go. config.Tracing maps onto Endpoint and
// Insecure; the daemon fills in ServiceName and ServiceVersion.
type Config struct {
	// Endpoint is the OTLP gRPC collector, host:port. Empty disables
	// tracing: Setup returns a no-op provider.
	Endpoint string
	// Insecure selects plaintext gRPC instead of TLS. TLS uses the system
	// roots unless OTEL_EXPORTER_OTLP_CERTIFICATE names a CA file.
	Insecure bool
	// ServiceName and ServiceVersion become the resource's service.name
	// and service.version, e.g. "lpu-device-plugin", "v0.3.1".
	ServiceName    string
	ServiceVersion string
	// ExportTimeout bounds one export including retries; 0 means
	// DefaultExportTimeout.
	ExportTimeout time.Duration
}

// Setup builds the tracer provider for one daemon. With an empty Endpoint
// it returns a no-op provider. Otherwise it returns an SDK provider that
// batches spans to an OTLP gRPC exporter and derives the Allocate span's
// IDs from the allocation ID (see IDGenerator).
//
// Setup fails open: it never dials (the connection is made lazily on the
// first export), starting and ending spans never wait for the collector
// (a full queue drops spans), every export is bounded by ExportTimeout, and
// export failures are logged once as a warning on logger (then counted,
// with one info record when exports succeed again) instead of going to
// the caller. It returns an error only for a malformed Endpoint or an
// exporter that cannot be built; the provider and shutdown it returns are
// then the no-op ones, so a caller can log the error and carry on.
//
// shutdown flushes pending spans and closes the connection, bounded by its
// context and DefaultShutdownTimeout.
func Setup(ctx context.Context, cfg Config, logger *slog.Logger) (oteltrace.TracerProvider, func(context.Context) error, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	noopShutdown := func(context.Context) error { return nil }
	if cfg.Endpoint == "" {
		logger.Debug("tracing disabled (no tracing.endpoint)")
		return noop.NewTracerProvider(), noopShutdown, nil
	}
	if err := checkEndpoint(cfg.Endpoint); err != nil {
		return noop.NewTracerProvider(), noopShutdown, err
	}
	timeout := cfg.ExportTimeout
	if timeout <= 0 {
		timeout = DefaultExportTimeout
	}
	opts := []otlptracegrpc.Option{
		otlptracegrpc.WithEndpoint(cfg.Endpoint),
		otlptracegrpc.WithTimeout(timeout),
	}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	// Otherwise TLS: system roots, or the CA and client certificate named
	// by OTEL_EXPORTER_OTLP_CERTIFICATE / _CLIENT_CERTIFICATE / _CLIENT_KEY,
	// which the exporter reads itself (as it does _HEADERS).
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return noop.NewTracerProvider(), noopShutdown, fmt.Errorf("tracing endpoint %s: create otlp exporter: %w", cfg.Endpoint, err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	res := serviceResource(ctx, name, cfg.ServiceVersion)
	fo := &failOpen{SpanExporter: exp, log: logger.With("endpoint", cfg.Endpoint)}
	tp := NewProvider(
		sdktrace.WithBatcher(fo, sdktrace.WithExportTimeout(timeout)),
		sdktrace.WithResource(res),
	)
	logger.Info("tracing enabled", "endpoint", cfg.Endpoint, "insecure", cfg.Insecure, "service", name)
	shutdown := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, DefaultShutdownTimeout)
		defer cancel()
		err := tp.Shutdown(ctx)
		if n := fo.failures(); n > 0 {
			logger.Debug("tracing shut down", "endpoint", cfg.Endpoint, "failed_exports", n)
		}
		if err != nil {
			return fmt.Errorf("tracing shutdown: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// serviceResource is the resource the spans carry: the service's name and
// version (when set) over what OTEL_RESOURCE_ATTRIBUTES and the host say.
func serviceResource(ctx context.Context, name, version string) *resource.Resource {
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	res := resource.NewSchemaless(attrs...)
	if env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithHost()); err == nil {
		if merged, err := resource.Merge(env, res); err == nil { // ours win
			res = merged
		}
	}
	return res
}

// NewProvider returns an SDK tracer provider with this package's
// IDGenerator and a parent-based always-on sampler, plus opts (an exporter
// or span processor). Setup uses it; tests use it with an in-memory
// exporter (go.opentelemetry.io/otel/sdk/trace/tracetest).
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	base := []sdktrace.TracerProviderOption{
		sdktrace.WithIDGenerator(IDGenerator()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	return sdktrace.NewTracerProvider(append(base, opts...)...)
}

// checkEndpoint wants host:port with a host and a port 1-65535, as the
// OTLP gRPC exporter dials it.
func checkEndpoint(e string) error {
	if strings.Contains(e, "://") {
		return fmt.Errorf("tracing endpoint %q: want host:port without a scheme", e)
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		return fmt.Errorf("tracing endpoint %q: want host:port: %w", e, err)
	}
	if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("tracing endpoint %q: want host:port with a host and a port 1-65535", e)
	}
	return nil
}

// failOpen wraps the exporter so its errors never reach the caller or
// otel's global error handler: the first failure of an outage is one warning,
// the following ones are counted, and the first success after an outage is
// one info record. Spans of a failed export are dropped.
type failOpen struct {
	sdktrace.SpanExporter
	log *slog.Logger

	mu      sync.Mutex
	failing bool
	total   uint64 // failed exports since start
	outage  uint64 // failed exports in the current outage
}

func (f *failOpen) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := f.SpanExporter.ExportSpans(ctx, spans)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.total++
		f.outage++
		if !f.failing {
			f.failing = true
			f.log.Warn("trace export failed; spans are dropped, allocation and injection are not affected; further failures are counted until export works again",
				"err", err, "spans", len(spans))
		}
		return nil
	}
	if f.failing {
		f.log.Info("trace export works again", "failed_exports", f.outage)
		f.failing, f.outage = false, 0
	}
	return nil
}

func (f *failOpen) failures() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}
