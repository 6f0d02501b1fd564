package plugin

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

func TestCreateContainerSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := trace.NewProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }() // nothing left to export
	f := newFixture(t, 8, false, func(c *Config) { c.Tracer = tp.Tracer(trace.ScopeName) })
	id := inject.NewAllocationID()
	ann, err := f.key.AnnotationsWithID([]string{"lpu3", "lpu4"}, id)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := f.p.CreateContainer(ctx, pod("s", nil), ctr("s", ann)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.p.CreateContainer(ctx, pod("s", nil), ctr("s", map[string]string{inject.AnnotationDevices: "lpu0"})); err == nil {
		t.Fatal("forged annotation accepted")
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	ok, refused := spans[0], spans[1]
	if ok.Name != trace.SpanCreateContainer || len(ok.Links) != 1 || ok.Links[0].SpanContext.SpanID() != trace.AllocationSpanContext(id).SpanID() ||
		ok.Links[0].SpanContext.TraceID() != trace.AllocationSpanContext(id).TraceID() {
		t.Fatalf("injected span %s links %v, want one link to the Allocate span of %s", ok.Name, ok.Links, id)
	}
	got := map[string]any{}
	for _, kv := range ok.Attributes {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	if ids, _ := got[string(trace.AttrDeviceIDs)].([]string); !slices.Equal(ids, []string{"lpu3", "lpu4"}) || got[string(trace.AttrAllocationID)] != id {
		t.Fatalf("span attributes %v", got)
	}
	if ok.Status.Code == codes.Error || refused.Status.Code != codes.Error || len(refused.Links) != 0 {
		t.Fatalf("statuses %v / %v, refused links %v", ok.Status, refused.Status, refused.Links)
	}
}
