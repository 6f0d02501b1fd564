package trace

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l } // attrs not needed by the tests
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// at returns the messages logged at level.
func (l *logRecorder) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level == level {
			out = append(out, r.Message)
		}
	}
	return out
}

func (l *logRecorder) attr(msg, key string) (slog.Value, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		var v slog.Value
		var found bool
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

// receiver is an in-process OTLP trace collector over real gRPC. The
// first failFirst exports are refused with InvalidArgument (not retried).
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu        sync.Mutex
	failFirst int
	calls     int
	got       []*tracepb.ResourceSpans
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls <= r.failFirst {
		return nil, status.Error(codes.InvalidArgument, "collector refuses this batch")
	}
	r.got = append(r.got, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) spans() map[string]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, rs := range r.got {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out[s.GetName()] = s
			}
		}
	}
	return out
}

func (r *receiver) resourceAttr(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.got {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == key {
				return kv.GetValue().GetStringValue()
			}
		}
	}
	return ""
}

func startReceiver(t *testing.T, failFirst int) (*receiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{failFirst: failFirst}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r, lis.Addr().String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func strAttr(s *tracepb.Span, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}

// countGlobalErrors makes otel's global error handler count what reaches
// it, for the duration of the test.
func countGlobalErrors(t *testing.T) func() int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {
		mu.Lock()
		n++
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

func TestSetupDisabled(t *testing.T) {
	logs := &logRecorder{}
	tp, shutdown, err := Setup(context.Background(), Config{}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	_, span := StartAllocate(context.Background(), tp.Tracer(ScopeName), "r", []string{"lpu0"}, 0, true, testAllocID)
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("disabled tracing records spans")
	}
	End(span, errors.New("x"))
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if w := logs.at(slog.LevelWarn); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
}

func TestSetupBadEndpoint(t *testing.T) {
	tests := map[string]struct {
		endpoint string
		wantErr  string
	}{
		"no port":    {"collector", `tracing endpoint "collector": want host:port`},
		"scheme":     {"http://collector:4317", "without a scheme"},
		"no host":    {":4317", "with a host and a port"},
		"port zero":  {"collector:0", "port 1-65535"},
		"named port": {"collector:otlp", "port 1-65535"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tp, shutdown, err := Setup(context.Background(), Config{Endpoint: tc.endpoint, Insecure: true}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Setup(%q) err = %v, want %q", tc.endpoint, err, tc.wantErr)
			}
			if tp == nil || shutdown == nil {
				t.Fatal("Setup returned nil provider or shutdown with its error")
			}
			_, span := tp.Tracer(ScopeName).Start(context.Background(), "x")
			if span.IsRecording() {
				t.Error("provider returned with an error records spans")
			}
			if err := shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
}

// TestSetupExportsToCollector: both spans arrive at a real OTLP gRPC
// receiver, with attributes, resource and the link.
func TestSetupExportsToCollector(t *testing.T) {
	rcv, addr := startReceiver(t, 0)
	logs := &logRecorder{}
	tp, shutdown, err := Setup(context.Background(), Config{Endpoint: addr, Insecure: true, ServiceName: "lpu-device-plugin", ServiceVersion: "v1.2.3"}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	tracer := tp.Tracer(ScopeName)
	_, a := StartAllocate(context.Background(), tracer, "hyperaccel.ai/lpu", []string{"lpu2", "lpu3"}, 1, true, testAllocID)
	End(a, nil)
	_, c := StartCreateContainer(context.Background(), tracer, "pod-a", "default", "app", testAllocID)
	End(c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	spans := rcv.spans()
	alloc, cc := spans[SpanAllocate], spans[SpanCreateContainer]
	if alloc == nil || cc == nil {
		t.Fatalf("receiver got spans %v, want Allocate and CreateContainer", spans)
	}
	want := AllocationSpanContext(testAllocID)
	tid, sid := want.TraceID(), want.SpanID()
	if string(alloc.GetTraceId()) != string(tid[:]) || string(alloc.GetSpanId()) != string(sid[:]) {
		t.Errorf("Allocate ids %x/%x, want %s/%s", alloc.GetTraceId(), alloc.GetSpanId(), tid, sid)
	}
	if len(cc.GetLinks()) != 1 || string(cc.GetLinks()[0].GetTraceId()) != string(alloc.GetTraceId()) || string(cc.GetLinks()[0].GetSpanId()) != string(alloc.GetSpanId()) {
		t.Errorf("CreateContainer links %v, want one to the Allocate span", cc.GetLinks())
	}
	if v, ok := strAttr(alloc, string(AttrDeviceIDs)); !ok || len(v.GetArrayValue().GetValues()) != 2 || v.GetArrayValue().GetValues()[1].GetStringValue() != "lpu3" {
		t.Errorf("Allocate %s = %v", AttrDeviceIDs, v)
	}
	if v, ok := strAttr(alloc, string(AttrRing)); !ok || v.GetIntValue() != 1 {
		t.Errorf("Allocate %s = %v", AttrRing, v)
	}
	if v, ok := strAttr(cc, string(AttrPod)); !ok || v.GetStringValue() != "pod-a" {
		t.Errorf("CreateContainer %s = %v", AttrPod, v)
	}
	if got := rcv.resourceAttr("service.name"); got != "lpu-device-plugin" {
		t.Errorf("service.name = %q", got)
	}
	if got := rcv.resourceAttr("service.version"); got != "v1.2.3" {
		t.Errorf("service.version = %q", got)
	}
	if w := logs.at(slog.LevelWarn); len(w) != 0 {
		t.Errorf("warnings with a working collector: %q", w)
	}
	if i := logs.at(slog.LevelInfo); len(i) != 1 || i[0] != "tracing enabled" {
		t.Errorf("info records %q, want only \"tracing enabled\"", i)
	}
}

// TestFailOpen: a collector that is down, or speaks plaintext to our TLS,
// never slows span creation, never returns an error to the caller or to
// otel's global handler, and costs exactly one warning.
func TestFailOpen(t *testing.T) {
	tests := map[string]struct {
		endpoint func(t *testing.T) string
		insecure bool
	}{
		"closed port": {endpoint: func(t *testing.T) string { return closedPort(t) }, insecure: true},
		"tls to plaintext collector": {endpoint: func(t *testing.T) string {
			_, addr := startReceiver(t, 0)
			return addr
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			globalErrors := countGlobalErrors(t)
			logs := &logRecorder{}
			start := time.Now()
			tp, shutdown, err := Setup(context.Background(), Config{Endpoint: tc.endpoint(t), Insecure: tc.insecure, ExportTimeout: 300 * time.Millisecond}, slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Setup took %v with a dead collector", d)
			}
			tracer := tp.Tracer(ScopeName)
			// More spans than the batch queue holds: the overflow is
			// dropped, not waited for.
			start = time.Now()
			for i := range 2500 {
				_, a := StartAllocate(context.Background(), tracer, "r", []string{"lpu0"}, 0, true, newTestID(i))
				End(a, nil)
				_, c := StartCreateContainer(context.Background(), tracer, "p", "ns", "c", newTestID(i))
				End(c, nil)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("5000 spans took %v with a dead collector", d)
			}
			sdk := tp.(*sdktrace.TracerProvider)
			for range 3 { // several failed exports
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start = time.Now()
				if err := sdk.ForceFlush(ctx); err != nil {
					t.Errorf("ForceFlush returned %v; export errors must not reach callers", err)
				}
				cancel()
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("flush took %v, export timeout is 300ms", d)
				}
				_, s := StartCreateContainer(context.Background(), tracer, "p", "ns", "c", testAllocID)
				End(s, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start = time.Now()
			_ = shutdown(ctx) // may report its own deadline; must return in time
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("shutdown took %v", d)
			}
			if w := logs.at(slog.LevelWarn); len(w) != 1 || !strings.HasPrefix(w[0], "trace export failed") {
				t.Errorf("warnings %q, want exactly one \"trace export failed\"", w)
			}
			if e := logs.at(slog.LevelError); len(e) != 0 {
				t.Errorf("errors logged: %q", e)
			}
			if n := globalErrors(); n != 0 {
				t.Errorf("%d errors reached otel's global error handler", n)
			}
		})
	}
}

// TestFailOpenRecovers: after an outage one info record says export works
// again, with the number of failed exports; a new outage warns again.
func TestFailOpenRecovers(t *testing.T) {
	rcv, addr := startReceiver(t, 2)
	logs := &logRecorder{}
	tp, shutdown, err := Setup(context.Background(), Config{Endpoint: addr, Insecure: true, ExportTimeout: 2 * time.Second}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }() // nothing left to export
	sdk := tp.(*sdktrace.TracerProvider)
	flushOne := func(name string) {
		_, s := StartCreateContainer(context.Background(), tp.Tracer(ScopeName), name, "ns", "c", "")
		End(s, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sdk.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	flushOne("refused-1")
	flushOne("refused-2")
	if w := logs.at(slog.LevelWarn); len(w) != 1 {
		t.Fatalf("warnings after 2 refused exports: %q, want 1", w)
	}
	flushOne("accepted")
	if got := rcv.spans(); len(got) != 1 || got[SpanCreateContainer] == nil {
		t.Errorf("receiver holds %v", got)
	}
	v, ok := logs.attr("trace export works again", "failed_exports")
	if !ok || v.Uint64() != 2 {
		t.Errorf("recovery record failed_exports = %v (found %v), want 2; info: %q", v, ok, logs.at(slog.LevelInfo))
	}
	rcv.mu.Lock()
	rcv.failFirst = rcv.calls + 1
	rcv.mu.Unlock()
	flushOne("refused-3")
	if w := logs.at(slog.LevelWarn); len(w) != 2 {
		t.Errorf("warnings after a second outage: %q, want 2", w)
	}
}

// newTestID returns a distinct allocation-ID-shaped string for i.
func newTestID(i int) string {
	const hexdigits = "0123456789abcdef"
	b := []byte(testAllocID)
	for j := 0; j < 8; j++ {
		b[len(b)-1-j] = hexdigits[(i>>(4*j))&0xf]
	}
	return string(b)
}
