package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the HTTP server. The endpoint is reachable from pods (the
// chart's NetworkPolicy narrows that to the monitoring namespace), so every
// resource a client can hold is bounded: a scrape is a few KiB, a probe
// less, and both daemons run under a 128 MiB memory limit.
const (
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds writing a response (a scrape renders in
	// milliseconds; a client that does not read is cut off).
	WriteTimeout = 30 * time.Second
	// IdleTimeout closes keep-alive connections idle this long (Prometheus
	// scrapes every 15-60s and reconnects when needed).
	IdleTimeout = 30 * time.Second
	// MaxHeaderBytes bounds request headers; larger ones get 431.
	MaxHeaderBytes = 8 << 10
	// MaxConns caps open connections. One beyond takes the slot of the
	// oldest connection that has sent nothing yet (or idled longer than
	// ReadHeaderTimeout), else is reset at once: a flood of silent
	// connections cannot starve the probes.
	MaxConns = 64
	// ShutdownTimeout bounds the graceful shutdown when the context ends:
	// Serve returns after it even while requests are still running.
	ShutdownTimeout = 2 * time.Second
)

// Limits are the server's bounds; the zero value of a field means its
// default constant above.
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes, MaxConns                                  int
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, ReadHeaderTimeout)
	def(&l.ReadTimeout, ReadTimeout)
	def(&l.WriteTimeout, WriteTimeout)
	def(&l.IdleTimeout, IdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = MaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = MaxConns
	}
	return l
}

// Check is a probe condition: nil while it holds, else why not.
type Check func() error

// Handler serves /metrics from g, and /healthz and /readyz: each probe
// answers 200 "ok" while its check passes (a nil check always passes), else
// 503 with the check's error as the body.
func Handler(g prometheus.Gatherer, healthz, readyz Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", probe(healthz))
	mux.HandleFunc("/readyz", probe(readyz))
	return noBody(mux)
}

// noBody refuses a request that announces a body (none of the endpoints
// takes one) and ends the connection's read deadline: net/http would
// otherwise keep the connection, and its slot, until the announced body
// arrived or the read timeout passed, even with "Connection: close" (it
// drains the body first). So a connection holds no slot once its answer
// is written, whatever body it announced.
func noBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		http.Error(w, "request bodies are not accepted", http.StatusRequestEntityTooLarge)
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	})
}

func probe(c Check) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if c != nil {
			if err := c(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}

// Serve listens on addr (HOST:PORT) and serves h until ctx ends, then
// shuts the server down. An empty addr disables the endpoint: Serve then
// just waits for ctx. It returns nil after ctx ends, and an error when the
// address cannot be listened on or the server fails.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, log)
}

// ServeListener is Serve on an open listener, which it closes (tests use
// 127.0.0.1:0). A nil log logs nothing.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	return ServeLimited(ctx, ln, h, log, Limits{})
}

// ServeLimited is ServeListener with explicit limits (tests shorten them).
func ServeLimited(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger, lim Limits) error {
	lim = lim.withDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
	}
	lln := newLimitListener(ln, lim.MaxConns, lim.ReadHeaderTimeout)
	srv.ConnState = lln.connState
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lln) }()
	if log != nil {
		log.Info("serving metrics", "addr", ln.Addr().String(), "maxConns", lim.MaxConns, "idleTimeout", lim.IdleTimeout)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("metrics serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("metrics shutdown: %w", err)
		}
		return nil
	}
}

// limitListener hands out at most max connections at a time. When all are
// taken, a newcomer takes the slot of the oldest connection that has not
// sent a whole request header yet (or has idled as a keep-alive
// connection longer than idleGrace); failing that, of the oldest
// connection of the source address holding the most slots, when that
// source holds more than the newcomer's (a fair share: one source cannot
// keep another out, whatever its connections do); the one that loses its
// slot is reset. With none such, the newcomer is reset at once instead of
// waiting in the accept queue (so no TIME_WAIT is left and no goroutine
// is spent on it). Neither silent nor busy connections of tenant pods can
// therefore starve the kubelet's probes, however fast they reconnect.
type limitListener struct {
	net.Listener
	max       int
	idleGrace time.Duration
	mu        sync.Mutex
	conns     []*limitConn // open, in accept order
}

func newLimitListener(ln net.Listener, n int, idleGrace time.Duration) *limitListener {
	return &limitListener{Listener: ln, max: n, idleGrace: idleGrace}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, state: http.StateNew, since: time.Now(), src: source(c)}
		l.mu.Lock()
		var victim *limitConn
		if len(l.conns) >= l.max {
			if victim = l.evictable(lc.since, lc.src); victim == nil {
				l.mu.Unlock()
				reset(c)
				continue
			}
		}
		l.conns = append(l.conns, lc)
		l.mu.Unlock()
		if victim != nil {
			reset(victim.Conn) // its server goroutine sees the error and closes it
		}
		return lc, nil
	}
}

// evictable removes and returns the connection a newcomer from src may
// take the slot of, nil when there is none: a silent or long-idle one of
// a source holding at least as many slots as src (the one holding the
// most, oldest first), else the oldest of the source holding the most
// when that is more than src holds. l.mu is held.
func (l *limitListener) evictable(now time.Time, src string) *limitConn {
	held := make(map[string]int, 4)
	top := ""
	for _, c := range l.conns {
		held[c.src]++
		if top == "" || held[c.src] > held[top] {
			top = c.src
		}
	}
	best := -1
	for i, c := range l.conns {
		quiet := c.state == http.StateNew || (c.state == http.StateIdle && now.Sub(c.since) >= l.idleGrace)
		if quiet && held[c.src] >= held[src] && (best < 0 || held[c.src] > held[l.conns[best].src]) {
			best = i
		}
	}
	if best < 0 && held[top] > held[src] {
		best = slices.IndexFunc(l.conns, func(c *limitConn) bool { return c.src == top }) // its oldest
	}
	if best < 0 {
		return nil
	}
	c := l.conns[best]
	l.conns = append(l.conns[:best], l.conns[best+1:]...)
	return c
}

// source is the remote IP address of c, what the fair share counts by.
func source(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// connState is the server's ConnState hook: it tells silent and idle
// connections from those serving a request.
func (l *limitListener) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.state, lc.since = s, time.Now()
}

func (l *limitListener) remove(c *limitConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.conns, c); i >= 0 {
		l.conns = append(l.conns[:i], l.conns[i+1:]...)
	}
}

// reset closes c with a reset rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// limitConn gives its slot back on the first Close.
type limitConn struct {
	net.Conn
	l     *limitListener
	once  sync.Once
	state http.ConnState // guarded by l.mu
	since time.Time      // when state was entered; guarded by l.mu
	src   string         // remote IP address
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.remove(c) })
	return err
}
