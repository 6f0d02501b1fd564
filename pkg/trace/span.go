package trace

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	SpanAllocate        = "Allocate"
	SpanCreateContainer = "CreateContainer"
	SpanPrepare         = "PrepareResourceClaim" // lpu-dra, one per claim
)

// Attribute keys of the two spans, in one place.
const (
	AttrAllocationID = attribute.Key("lpu.allocation.id")      // both spans
	AttrResource     = attribute.Key("lpu.resource")           // Allocate: extended resource name
	AttrDeviceIDs    = attribute.Key("lpu.device.ids")         // Allocate; CreateContainer via RecordDevices
	AttrDeviceCount  = attribute.Key("lpu.device.count")       // with AttrDeviceIDs
	AttrRing         = attribute.Key("lpu.ring")               // Allocate: ring index, -1 when the set spans rings
	AttrContiguous   = attribute.Key("lpu.contiguous")         // Allocate: one contiguous ring arc
	AttrPod          = attribute.Key("k8s.pod.name")           // CreateContainer
	AttrNamespace    = attribute.Key("k8s.namespace.name")     // CreateContainer
	AttrContainer    = attribute.Key("k8s.container.name")     // CreateContainer
	AttrClaim        = attribute.Key("k8s.resourceclaim.name") // PrepareResourceClaim
	AttrClaimUID     = attribute.Key("k8s.resourceclaim.uid")  // PrepareResourceClaim
	AttrPodUIDs      = attribute.Key("k8s.pod.uids")           // PrepareResourceClaim: pods the claim is reserved for
)

// StartPrepare starts lpu-dra's span for preparing one ResourceClaim, a
// child of any span in ctx. The LPU IDs are added with RecordDevices once
// resolved.
func StartPrepare(ctx context.Context, tracer oteltrace.Tracer, namespace, claim, claimUID string, podUIDs []string) (context.Context, oteltrace.Span) {
	ctx, span := tracer.Start(ctx, SpanPrepare, serverKind)
	if span.IsRecording() {
		span.SetAttributes(
			AttrNamespace.String(namespace),
			AttrClaim.String(claim),
			AttrClaimUID.String(claimUID),
			AttrPodUIDs.StringSlice(podUIDs),
		)
	}
	return ctx, span
}

// AllocationSpanContext returns the span context of the Allocate span of
// allocID as any process can compute it from the ID alone: with
// h = SHA-256 of the ID's bytes, trace ID = h[0:16], span ID = h[16:24],
// sampled, remote. It returns an invalid (zero) span context for an empty
// ID.
func AllocationSpanContext(allocID string) oteltrace.SpanContext {
	tid, sid, ok := allocationIDs(allocID)
	if !ok {
		return oteltrace.SpanContext{}
	}
	return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     sid,
		TraceFlags: oteltrace.FlagsSampled,
		Remote:     true,
	})
}

func allocationIDs(allocID string) (oteltrace.TraceID, oteltrace.SpanID, bool) {
	var tid oteltrace.TraceID
	var sid oteltrace.SpanID
	if allocID == "" {
		return tid, sid, false
	}
	h := sha256.Sum256([]byte(allocID))
	copy(tid[:], h[0:16])
	copy(sid[:], h[16:24])
	// An all-zero ID is invalid in OpenTelemetry; SHA-256 will not give
	// one in practice, but make it impossible.
	if !tid.IsValid() {
		tid[15] = 1
	}
	if !sid.IsValid() {
		sid[7] = 1
	}
	return tid, sid, true
}

// serverKind is built once: with tracing off, a span option made per call
// would be one more allocation on each request path.
var serverKind = oteltrace.WithSpanKind(oteltrace.SpanKindServer)

// StartAllocate starts the device plugin's Allocate span for one container
// allocation. The span is a new root whose trace and span IDs are derived
// from allocID (AllocationSpanContext), so lpu-nri can link to it knowing
// only the ID; a span already in ctx (a traced kubelet call) becomes a link
// instead of the parent. The derivation needs a provider built by Setup or
// NewProvider; with another provider the span gets random IDs.
func StartAllocate(ctx context.Context, tracer oteltrace.Tracer, resource string, ids []string, ring int, contiguous bool, allocID string) (context.Context, oteltrace.Span) {
	idCtx := ctx
	if allocID != "" {
		idCtx = context.WithValue(ctx, allocKey{}, allocID)
	}
	_, span := tracer.Start(idCtx, SpanAllocate, oteltrace.WithNewRoot(), serverKind)
	// Attributes and links only for a recording span: with tracing off
	// (no-op provider) the span costs next to nothing.
	if span.IsRecording() {
		span.SetAttributes(
			AttrResource.String(resource),
			AttrDeviceIDs.StringSlice(ids),
			AttrDeviceCount.Int(len(ids)),
			AttrRing.Int(ring),
			AttrContiguous.Bool(contiguous),
			AttrAllocationID.String(allocID),
		)
		if parent := oteltrace.SpanContextFromContext(ctx); parent.IsValid() {
			span.AddLink(oteltrace.Link{SpanContext: parent})
		}
	}
	// The returned context must not carry the allocation ID: another new
	// root started from it would get the same IDs.
	return oteltrace.ContextWithSpan(ctx, span), span
}

// StartCreateContainer starts lpu-nri's CreateContainer span for one
// container, linked to the Allocate span of allocID (no link when allocID
// is empty: an unallocated container, or an allocation sealed before
// allocation IDs). A span already in ctx stays the parent. When the ID is
// known only later, pass "" and call LinkAllocation.
func StartCreateContainer(ctx context.Context, tracer oteltrace.Tracer, pod, namespace, container, allocID string) (context.Context, oteltrace.Span) {
	ctx, span := tracer.Start(ctx, SpanCreateContainer, serverKind)
	if span.IsRecording() {
		span.SetAttributes(
			AttrPod.String(pod),
			AttrNamespace.String(namespace),
			AttrContainer.String(container),
		)
		LinkAllocation(span, allocID)
	}
	return ctx, span
}

// LinkAllocation links span to the Allocate span of allocID and records the
// ID, for a CreateContainer span started before the allocation was opened.
// It does nothing for an empty ID.
func LinkAllocation(span oteltrace.Span, allocID string) {
	if !span.IsRecording() {
		return
	}
	if link, ok := allocationLink(allocID); ok {
		span.AddLink(link)
		span.SetAttributes(AttrAllocationID.String(allocID))
	}
}

func allocationLink(allocID string) (oteltrace.Link, bool) {
	sc := AllocationSpanContext(allocID)
	if !sc.IsValid() {
		return oteltrace.Link{}, false
	}
	return oteltrace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrAllocationID.String(allocID)}}, true
}

// RecordDevices records the device IDs a container got (lpu-nri, after the
// allocation was verified against its inventory).
func RecordDevices(span oteltrace.Span, ids []string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrDeviceIDs.StringSlice(ids), AttrDeviceCount.Int(len(ids)))
}

// End ends span, first recording err (a refused allocation or container)
// as the span's error status when it is not nil.
func End(span oteltrace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// allocKey carries the allocation ID from StartAllocate to the ID
// generator.
type allocKey struct{}

// IDGenerator returns the generator Setup and NewProvider install: a new
// root span started by StartAllocate gets the IDs of
// AllocationSpanContext(allocID); every other span gets random IDs.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

func (idGenerator) NewIDs(ctx context.Context) (oteltrace.TraceID, oteltrace.SpanID) {
	if id, ok := ctx.Value(allocKey{}).(string); ok {
		if tid, sid, ok := allocationIDs(id); ok {
			return tid, sid
		}
	}
	var tid oteltrace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ oteltrace.TraceID) oteltrace.SpanID {
	return randomSpanID()
}

func randomSpanID() oteltrace.SpanID {
	var sid oteltrace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
