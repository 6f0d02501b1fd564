package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/health"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/kubelettest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
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
	defer tp.Shutdown(context.Background())

	root := devicetest.NewTree(t, eight()...)
	dir, state := kubelettest.ShortDir(t), kubelettest.ShortDir(t)
	key, err := inject.LoadOrCreateKey(state)
	if err != nil {
		t.Fatal(err)
	}
	k := kubelettest.Start(t, dir)
	mon := health.New(device.NewSysfs(root), health.Options{ResyncInterval: time.Hour})
	p, err := New(mon, Options{ResourceName: resource, KubeletDir: dir, StateDir: state, Injection: InjectionNRI,
		Policy: PolicyStrict, Key: key, Tracer: tp.Tracer(trace.ScopeName)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- mon.Run(ctx) }()
	<-mon.Ready()
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done; <-done }()
	c := k.Dial(t, k.WaitRegistration(t, 5*time.Second))

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
