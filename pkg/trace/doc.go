// Package trace owns the OpenTelemetry tracing of both daemons: the tracer
// provider (Setup), the two spans they create and their attribute names,
// and how the two spans find each other across processes.
//
// # Spans
//
// The device plugin starts one Allocate span per container allocation
// (StartAllocate: resource, device IDs in ring order, ring, contiguous,
// allocation ID). lpu-nri starts one CreateContainer span per container
// (StartCreateContainer: pod, namespace, container), linked to the Allocate
// span of the allocation it injects. Attribute keys are the Attr*
// constants; End records a refusal as the span's error.
//
// # Linking through the allocation ID
//
// The device plugin and lpu-nri are separate processes and share nothing
// at run time except the container annotations, which carry a random
// allocation ID sealed together with the devices (inject.NewAllocationID,
// Key.AnnotationsWithID, Key.OpenAllocation). Both sides derive the
// Allocate span's identity from that ID alone:
//
//	h        = SHA-256(allocation ID as its 32 ASCII hex digits)
//	trace ID = h[0:16]
//	span ID  = h[16:24]
//
// StartAllocate starts the Allocate span as a new root with exactly these
// IDs (the provider's IDGenerator reads the ID from the context; Setup and
// NewProvider install it). StartCreateContainer computes the same span
// context (AllocationSpanContext) and adds it as a link, so a trace
// backend shows the CreateContainer span pointing at the Allocate span
// without any propagation header. A container restarted by kubelet
// replays the same annotations, so every CreateContainer of one
// allocation links to the one Allocate span. Allocations sealed before
// allocation IDs existed open with an empty ID: their CreateContainer span
// has no link. The ID is random and single use, so derived IDs do not
// collide in practice; they reveal nothing the annotation does not.
//
// # Failing open
//
// Tracing is off unless config sets tracing.endpoint. When on, tracing
// must never delay or fail allocation or injection: Setup does not dial
// (gRPC connects lazily), spans are queued for a batch processor that
// drops them when its queue is full, each export is bounded by
// Config.ExportTimeout, and export errors never reach the caller. The
// first failed export logs one warning; later failures are only counted
// until an export succeeds again (one info record). An unreachable or TLS
// mismatched collector therefore costs one log line.
//
// Endpoint and insecure come from config (the export timeout is
// DefaultExportTimeout unless Config.ExportTimeout sets another); the
// exporter still reads the standard OTEL_EXPORTER_OTLP_* variables for
// what config does not cover (CA and client certificates, headers such as
// an auth token, compression), and OTEL_RESOURCE_ATTRIBUTES adds resource
// attributes (k8s.node.name, say) next to service.name and host.name.
//
// # Example
//
//	tp, shutdown, err := trace.Setup(ctx, trace.Config{
//		Endpoint: cfg.Tracing.Endpoint, Insecure: cfg.Tracing.Insecure,
//		ServiceName: "lpu-device-plugin", ServiceVersion: version,
//	}, logger)
//	if err != nil {
//		logger.Warn("tracing disabled", "err", err) // tp is a no-op provider
//	}
//	defer shutdown(context.Background())
//	tracer := tp.Tracer(trace.ScopeName)
//
//	// device plugin, per container request:
//	allocID := inject.NewAllocationID()
//	_, span := trace.StartAllocate(ctx, tracer, "hyperaccel.ai/lpu", pl.IDs, pl.Ring, pl.Contiguous, allocID)
//	ann, err := key.AnnotationsWithID(pl.IDs, allocID)
//	trace.End(span, err)
//
//	// lpu-nri, per CreateContainer:
//	alloc, err := key.OpenAllocation(ctr.GetAnnotations())
//	_, span := trace.StartCreateContainer(ctx, tracer, pod.GetName(), pod.GetNamespace(), ctr.GetName(), alloc.ID)
//	defer trace.End(span, err)
package trace
