package trace

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var benchIDs = []string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}

// BenchmarkAllocateSpanDisabled: the cost tracing adds to Allocate when it
// is off (no-op provider).
func BenchmarkAllocateSpanDisabled(b *testing.B) {
	tracer := noop.NewTracerProvider().Tracer(ScopeName)
	b.ReportAllocs()
	for b.Loop() {
		_, s := StartAllocate(context.Background(), tracer, "hyperaccel.ai/lpu", benchIDs, 0, true, testAllocID)
		End(s, nil)
	}
}

// BenchmarkAllocateSpanBatched: an Allocate span with the SDK's batch
// processor in front of an exporter that drops everything (the span
// path up to the queue, as with a collector).
func BenchmarkAllocateSpanBatched(b *testing.B) {
	tp := NewProvider(sdktrace.WithBatcher(discard{}))
	defer func() { _ = tp.Shutdown(context.Background()) }() // nothing left to export
	tracer := tp.Tracer(ScopeName)
	b.ReportAllocs()
	for b.Loop() {
		_, s := StartAllocate(context.Background(), tracer, "hyperaccel.ai/lpu", benchIDs, 0, true, testAllocID)
		End(s, nil)
	}
}

// BenchmarkCreateContainerSpanDeadCollector: a linked CreateContainer span
// while the collector's port is closed (fail open: nothing waits for it).
func BenchmarkCreateContainerSpanDeadCollector(b *testing.B) {
	tp, shutdown, err := Setup(context.Background(), Config{Endpoint: closedPort(b), Insecure: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }() // nothing left to export
	tracer := tp.Tracer(ScopeName)
	b.ReportAllocs()
	for b.Loop() {
		_, s := StartCreateContainer(context.Background(), tracer, "trainer-0", "ml", "main", testAllocID)
		RecordDevices(s, benchIDs)
		End(s, nil)
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
