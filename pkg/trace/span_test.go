package trace

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
)

const testAllocID = "5f0e8a1c2b3d4e5f60718293a4b5c6d7"

// memProvider is one daemon's provider writing to an in-memory exporter.
func memProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := NewProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func only(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != name {
		t.Fatalf("got %d spans %v, want one %q", len(spans), spanNames(spans), name)
	}
	return spans[0]
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func TestAllocationSpanContext(t *testing.T) {
	h := sha256.Sum256([]byte(testAllocID))
	sc := AllocationSpanContext(testAllocID)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("span context %+v: want valid, remote, sampled", sc)
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	if !slices.Equal(tid[:], h[0:16]) || !slices.Equal(sid[:], h[16:24]) {
		t.Errorf("ids %s/%s, want sha256 prefix %x/%x", sc.TraceID(), sc.SpanID(), h[0:16], h[16:24])
	}
	if other := AllocationSpanContext("ffeeddccbbaa99887766554433221100"); other.TraceID() == sc.TraceID() || other.SpanID() == sc.SpanID() {
		t.Error("different allocation IDs derive the same IDs")
	}
	if AllocationSpanContext("").IsValid() {
		t.Error("empty ID gave a valid span context")
	}
}

// TestLinkAcrossProcesses: the device plugin and lpu-nri each have their
// own provider; the CreateContainer span's link points at the Allocate
// span's span context knowing only the allocation ID.
func TestLinkAcrossProcesses(t *testing.T) {
	pluginTP, pluginExp := memProvider(t)
	nriTP, nriExp := memProvider(t)

	_, span := StartAllocate(context.Background(), pluginTP.Tracer(ScopeName), "hyperaccel.ai/lpu",
		[]string{"lpu7", "lpu0", "lpu1"}, 0, true, testAllocID)
	End(span, nil)
	alloc := only(t, pluginExp, SpanAllocate)

	_, span = StartCreateContainer(context.Background(), nriTP.Tracer(ScopeName), "trainer-0", "ml", "main", testAllocID)
	End(span, nil)
	cc := only(t, nriExp, SpanCreateContainer)

	if alloc.Parent.IsValid() {
		t.Errorf("Allocate has parent %v, want a root", alloc.Parent)
	}
	if alloc.SpanKind != oteltrace.SpanKindServer || cc.SpanKind != oteltrace.SpanKindServer {
		t.Errorf("kinds %v/%v, want server", alloc.SpanKind, cc.SpanKind)
	}
	want := AllocationSpanContext(testAllocID)
	if alloc.SpanContext.TraceID() != want.TraceID() || alloc.SpanContext.SpanID() != want.SpanID() {
		t.Errorf("Allocate ids %s/%s, want derived %s/%s", alloc.SpanContext.TraceID(), alloc.SpanContext.SpanID(), want.TraceID(), want.SpanID())
	}
	if len(cc.Links) != 1 {
		t.Fatalf("CreateContainer has %d links, want 1", len(cc.Links))
	}
	link := cc.Links[0].SpanContext
	if link.TraceID() != alloc.SpanContext.TraceID() || link.SpanID() != alloc.SpanContext.SpanID() {
		t.Errorf("link %s/%s does not point at Allocate %s/%s", link.TraceID(), link.SpanID(), alloc.SpanContext.TraceID(), alloc.SpanContext.SpanID())
	}
	if cc.SpanContext.TraceID() == alloc.SpanContext.TraceID() {
		t.Error("CreateContainer joined the Allocate trace; want its own trace with a link")
	}

	a := attrs(alloc)
	wantAlloc := map[attribute.Key]attribute.Value{
		AttrResource:     attribute.StringValue("hyperaccel.ai/lpu"),
		AttrDeviceIDs:    attribute.StringSliceValue([]string{"lpu7", "lpu0", "lpu1"}),
		AttrDeviceCount:  attribute.IntValue(3),
		AttrRing:         attribute.IntValue(0),
		AttrContiguous:   attribute.BoolValue(true),
		AttrAllocationID: attribute.StringValue(testAllocID),
	}
	for k, v := range wantAlloc {
		if a[k] != v {
			t.Errorf("Allocate %s = %v, want %v", k, a[k].String(), v.String())
		}
	}
	c := attrs(cc)
	wantCC := map[attribute.Key]attribute.Value{
		AttrPod:          attribute.StringValue("trainer-0"),
		AttrNamespace:    attribute.StringValue("ml"),
		AttrContainer:    attribute.StringValue("main"),
		AttrAllocationID: attribute.StringValue(testAllocID),
	}
	for k, v := range wantCC {
		if c[k] != v {
			t.Errorf("CreateContainer %s = %v, want %v", k, c[k].String(), v.String())
		}
	}
}

func TestSpanVariants(t *testing.T) {
	tests := map[string]struct {
		run   func(ctx context.Context, tr oteltrace.Tracer)
		check func(t *testing.T, spans tracetest.SpanStubs)
	}{
		"allocate without ID gets random IDs": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				_, s := StartAllocate(ctx, tr, "r", []string{"lpu0", "lpu2"}, -1, false, "")
				End(s, nil)
				_, s = StartAllocate(ctx, tr, "r", []string{"lpu0", "lpu2"}, -1, false, "")
				End(s, nil)
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				if spans[0].SpanContext.TraceID() == spans[1].SpanContext.TraceID() {
					t.Error("two allocations without ID share a trace ID")
				}
				if a := attrs(spans[0]); a[AttrRing] != attribute.IntValue(-1) || a[AttrContiguous] != attribute.BoolValue(false) {
					t.Errorf("ring/contiguous = %v/%v", a[AttrRing].String(), a[AttrContiguous].String())
				}
			},
		},
		"allocate under a traced call links the caller": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				ctx, parent := tr.Start(ctx, "kubelet")
				_, s := StartAllocate(ctx, tr, "r", []string{"lpu1"}, 0, true, testAllocID)
				End(s, nil)
				parent.End()
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				alloc, parent := spans[0], spans[1]
				if alloc.Parent.IsValid() || alloc.SpanContext.TraceID() != AllocationSpanContext(testAllocID).TraceID() {
					t.Errorf("Allocate parent %v trace %s: want a root with the derived trace ID", alloc.Parent, alloc.SpanContext.TraceID())
				}
				if len(alloc.Links) != 1 || alloc.Links[0].SpanContext.SpanID() != parent.SpanContext.SpanID() {
					t.Errorf("Allocate links %v, want the caller's span", alloc.Links)
				}
			},
		},
		"children of allocate and new roots after it get fresh IDs": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				actx, s := StartAllocate(ctx, tr, "r", []string{"lpu1"}, 0, true, testAllocID)
				_, child := tr.Start(actx, "child")
				child.End()
				_, root := tr.Start(actx, "other root", oteltrace.WithNewRoot())
				root.End()
				End(s, nil)
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				child, root, alloc := spans[0], spans[1], spans[2]
				if child.SpanContext.TraceID() != alloc.SpanContext.TraceID() || child.Parent.SpanID() != alloc.SpanContext.SpanID() {
					t.Errorf("child not under Allocate: %v", child.Parent)
				}
				if child.SpanContext.SpanID() == alloc.SpanContext.SpanID() {
					t.Error("child reused the Allocate span ID")
				}
				if root.SpanContext.TraceID() == alloc.SpanContext.TraceID() {
					t.Error("a new root started from Allocate's context reused the derived trace ID")
				}
			},
		},
		"create container without ID has no link": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				_, s := StartCreateContainer(ctx, tr, "p", "ns", "c", "")
				End(s, nil)
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				if len(spans[0].Links) != 0 {
					t.Errorf("links %v, want none", spans[0].Links)
				}
				if _, ok := attrs(spans[0])[AttrAllocationID]; ok {
					t.Error("allocation ID attribute without an ID")
				}
			},
		},
		"late link, devices and refusal": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				_, s := StartCreateContainer(ctx, tr, "p", "ns", "c", "")
				LinkAllocation(s, testAllocID)
				LinkAllocation(s, "") // no-op
				RecordDevices(s, []string{"lpu3", "lpu4"})
				End(s, errors.New("allocated device \"lpu4\" is unhealthy"))
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				s := spans[0]
				want := AllocationSpanContext(testAllocID)
				if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != want.SpanID() || s.Links[0].SpanContext.TraceID() != want.TraceID() {
					t.Errorf("links %v, want one to %v", s.Links, want)
				}
				a := attrs(s)
				if a[AttrAllocationID] != attribute.StringValue(testAllocID) || a[AttrDeviceCount] != attribute.IntValue(2) ||
					a[AttrDeviceIDs] != attribute.StringSliceValue([]string{"lpu3", "lpu4"}) {
					t.Errorf("attributes %v", s.Attributes)
				}
				if s.Status.Code != codes.Error || s.Status.Description != `allocated device "lpu4" is unhealthy` {
					t.Errorf("status %+v, want error with the refusal", s.Status)
				}
				if len(s.Events) != 1 || s.Events[0].Name != "exception" {
					t.Errorf("events %v, want the recorded error", s.Events)
				}
			},
		},
		"end without error leaves status unset": {
			run: func(ctx context.Context, tr oteltrace.Tracer) {
				_, s := StartCreateContainer(ctx, tr, "p", "ns", "c", testAllocID)
				End(s, nil)
			},
			check: func(t *testing.T, spans tracetest.SpanStubs) {
				if spans[0].Status.Code != codes.Unset || len(spans[0].Events) != 0 {
					t.Errorf("status %+v events %v", spans[0].Status, spans[0].Events)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tp, exp := memProvider(t)
			tc.run(context.Background(), tp.Tracer(ScopeName))
			spans := exp.GetSpans()
			if len(spans) == 0 {
				t.Fatal("no spans")
			}
			tc.check(t, spans)
		})
	}
}

// TestAllocationSpanContextVector pins the derivation both daemons rely on
// (computed outside Go: sha256sum of the ID's hex digits).
func TestAllocationSpanContextVector(t *testing.T) {
	sc := AllocationSpanContext(testAllocID)
	if got, want := sc.TraceID().String(), "d9c888c36671c29ccff0e6d7fa3ed227"; got != want {
		t.Errorf("trace ID %s, want %s", got, want)
	}
	if got, want := sc.SpanID().String(), "3d93bdb8c8e5f529"; got != want {
		t.Errorf("span ID %s, want %s", got, want)
	}
}
