package plugin

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestAllocateSpan: one Allocate span per container, whose IDs lpu-nri can
// derive from the allocation ID in the sealed annotations; refusals are
// error spans.
func TestAllocateSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := trace.NewProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // after the plugin stops

	n := start(t, setup{rows: eight(), policy: config.PolicyStrict, tracer: tp.Tracer(trace.ScopeName)})
	c, key := n.client, n.key

	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"lpu1", "lpu0"}}, {DevicesIds: []string{"lpu7", "lpu6", "lpu5"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per container", len(spans))
	}
	for i, s := range spans {
		a, err := key.OpenAllocation(resp.ContainerResponses[i].Annotations)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name() != trace.SpanAllocate {
			t.Fatalf("span name %q", s.Name())
		}
		want := trace.AllocationSpanContext(a.ID)
		if s.SpanContext().TraceID() != want.TraceID() || s.SpanContext().SpanID() != want.SpanID() {
			t.Fatalf("span %d ids %v/%v, want derived from allocation %s", i, s.SpanContext().TraceID(), s.SpanContext().SpanID(), a.ID)
		}
		if v, _ := attr(s, trace.AttrDeviceIDs); !slices.Equal(v.AsStringSlice(), a.IDs) {
			t.Fatalf("span device ids %v, want %v", v.AsStringSlice(), a.IDs)
		}
		if v, _ := attr(s, trace.AttrContiguous); !v.AsBool() {
			t.Fatal("span not marked contiguous")
		}
		if v, _ := attr(s, trace.AttrRing); v.AsInt64() != 0 {
			t.Fatalf("span ring %d", v.AsInt64())
		}
		if v, _ := attr(s, trace.AttrResource); v.AsString() != resource {
			t.Fatalf("span resource %q", v.AsString())
		}
	}

	exp.Reset()
	if _, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"lpu0", "lpu4"}},
	}}); err == nil {
		t.Fatal("strict policy accepted a non-contiguous set")
	}
	spans = exp.GetSpans().Snapshots()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error {
		t.Fatalf("refusal spans %v, want one error span", spans)
	}
}
