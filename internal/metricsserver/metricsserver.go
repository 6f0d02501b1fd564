package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
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
	// MaxConns caps open connections from the pod network. One beyond
	// takes the slot of the connection quiet longest (sent nothing yet, or
	// idled longer than ReadHeaderTimeout), or a fair share of the source
	// holding the most, else is reset at once: a flood of silent
	// connections cannot starve the probes.
	MaxConns = 64
	// HostConns is the number of slots kept, beyond MaxConns, for the
	// node's own addresses, where the kubelet probes from: liveness,
	// readiness and startup probes at once, and one to spare.
	HostConns = 4
	// AcceptGrace is how long a just-accepted connection that has sent
	// nothing keeps its slot against other sources: a fair chance to send
	// its request header (a client on the node sends it at once).
	AcceptGrace = time.Second
	// ShutdownTimeout bounds the graceful shutdown when the context ends:
	// Serve returns after it even while requests are still running.
	ShutdownTimeout = 2 * time.Second
)

// Limits are the server's bounds; the zero value of a field means its
// default constant above.
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout, AcceptGrace time.Duration
	MaxHeaderBytes, MaxConns, HostConns                                    int
	// Host are the node's own addresses: their connections take the
	// shared slots like any source's and, once those are taken, the
	// HostConns slots no other source can.
	Host []netip.Addr
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
	def(&l.AcceptGrace, AcceptGrace)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = MaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = MaxConns
	}
	if l.HostConns <= 0 {
		l.HostConns = HostConns
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
// shuts the server down. The node's own addresses (loopback, the gateways
// of this network namespace and those in HOST_IPS) get HostConns slots of
// their own, for the kubelet's probes. An empty addr disables the
// endpoint: Serve then just waits for ctx. It returns nil after ctx ends, and an error when the
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
	host := nodeAddrs(os.Getenv(HostIPsEnv), "/proc/net/route", "/proc/net/ipv6_route")
	return ServeLimited(ctx, ln, h, log, Limits{Host: host})
}

// ServeLimited is Serve on an open listener, which it closes (tests use
// 127.0.0.1:0), with explicit limits (zero fields take the defaults; tests
// shorten them). A nil log logs nothing.
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
	lln.hostMax, lln.grace = lim.HostConns, lim.AcceptGrace
	lln.host = make(map[netip.Addr]bool, len(lim.Host))
	for _, a := range lim.Host {
		lln.host[a.Unmap()] = true
	}
	srv.ConnState = lln.connState
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lln) }()
	if log != nil {
		log.Info("serving metrics", "addr", ln.Addr().String(), "maxConns", lim.MaxConns, "idleTimeout", lim.IdleTimeout,
			"nodeAddrs", lim.Host, "nodeConns", lim.HostConns)
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

// limitListener hands out at most max connections at a time, shared by
// every source, and hostMax more to the node's own addresses (host) once
// the shared ones are taken. When no slot is free, a newcomer takes the slot of a connection answered and
// closing (see CloseWrite), else of a quiet connection (one that has sent
// nothing since it was accepted, or has idled as a keep-alive connection
// longer than idleGrace) of a source holding at least as many
// slots as the newcomer's, the source holding the most first and, among
// its quiet connections, the one quiet longest; failing that, of the oldest
// connection of the source holding the most slots, when that source holds
// more than the newcomer's (a fair share: one source cannot keep another
// out, whatever its connections do). A connection accepted less than grace
// ago that has sent nothing yet is not taken by another source's newcomer
// unless its own source holds two slots more than the newcomer's: it had
// no fair chance to send its request header (a probe's connection is
// silent for its first microseconds). The one that loses its
// slot is reset (closed, if answered). With none such, the newcomer is reset at once instead of
// waiting in the accept queue (so no TIME_WAIT is left and no goroutine is
// spent on it).
//
// The node's slots are apart because fairness alone cannot keep the
// kubelet in: with more sources than slots, some source is out at any
// moment, and tenants can make as many sources as they have pods. The
// kubelet probes from the host, an address no pod can open a connection
// from, so slots kept for it hold whatever tenants do. Probes served on a
// port of their own would not: the kubelet reaches it on the pod's IP like
// this one, so tenants could flood it alike.
type limitListener struct {
	net.Listener
	max, hostMax     int
	grace, idleGrace time.Duration
	host             map[netip.Addr]bool // the node's own addresses
	mu               sync.Mutex
	conns            []*limitConn // open, in accept order
}

func newLimitListener(ln net.Listener, n int, idleGrace time.Duration) *limitListener {
	return &limitListener{Listener: ln, max: n, hostMax: HostConns, grace: AcceptGrace, idleGrace: idleGrace}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, state: http.StateNew, since: time.Now(), src: source(c)}
		lc.host = l.host[lc.src]
		l.mu.Lock()
		victim, ok := l.admit(lc)
		if !ok {
			l.mu.Unlock()
			reset(c)
			continue
		}
		l.conns = append(l.conns, lc)
		done := victim != nil && victim.done
		l.mu.Unlock()
		switch {
		case done:
			_ = victim.Conn.Close() // its answer is written: close, lose nothing
		case victim != nil:
			reset(victim.Conn) // its server goroutine sees the error and closes it
		}
		return lc, nil
	}
}

// admit finds newcomer n a slot: a free one of the shared pool, else (for
// the node's addresses) a free one of the node's, else one it may take in
// the shared pool, else (for the node's addresses) one it may take in the
// node's. It returns the connection to close for it (nil for a free slot),
// and false when n gets none. l.mu is held.
func (l *limitListener) admit(n *limitConn) (*limitConn, bool) {
	switch {
	case !l.full(false):
		return nil, true
	case n.host && !l.full(true):
		n.reserved = true
		return nil, true
	}
	if victim := l.evictable(n, false); victim != nil {
		return victim, true
	}
	if n.host {
		if victim := l.evictable(n, true); victim != nil {
			n.reserved = true
			return victim, true
		}
	}
	return nil, false
}

// full reports whether the node's slots (reserved) or the shared ones are
// all taken. l.mu is held.
func (l *limitListener) full(reserved bool) bool {
	n, limit := 0, l.max
	if reserved {
		limit = l.hostMax
	}
	for _, c := range l.conns {
		if c.reserved == reserved {
			n++
		}
	}
	return n >= limit
}

// evictable removes and returns the connection of the node's slots
// (reserved) or the shared ones that newcomer n may take the slot of, nil
// when there is none (see limitListener): one answered and closing, else a
// quiet one, else a fair share. l.mu is held.
func (l *limitListener) evictable(n *limitConn, reserved bool) *limitConn {
	held := make(map[netip.Addr]int, 4) // open slots by source, in that pool
	for _, c := range l.conns {
		if c.reserved == reserved && !c.done {
			held[c.src]++
		}
	}
	best := slices.IndexFunc(l.conns, func(c *limitConn) bool { return c.reserved == reserved && c.done })
	if best < 0 {
		best = l.quietest(n, held, reserved)
	}
	if best < 0 {
		best = l.fairShare(n, held, reserved)
	}
	if best < 0 {
		return nil
	}
	c := l.conns[best]
	l.conns = append(l.conns[:best], l.conns[best+1:]...)
	return c
}

// quietest is the index of the quiet connection of the pool (reserved: the node's slots) that n may
// take the slot of: of a source holding at least as many slots as n's,
// the one holding the most, and of its connections the one quiet longest;
// -1 when there is none. l.mu is held.
func (l *limitListener) quietest(n *limitConn, held map[netip.Addr]int, reserved bool) int {
	best := -1
	for i, c := range l.conns {
		if c.reserved != reserved || c.done || held[c.src] < held[n.src] || !l.quiet(c, n, held) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		if b := l.conns[best]; held[c.src] > held[b.src] || (held[c.src] == held[b.src] && c.since.Before(b.since)) {
			best = i
		}
	}
	return best
}

// fairShare is the index of the oldest connection, past its grace, of the
// source holding the most slots in the pool (reserved: the node's slots), when that is more than n's
// source holds; -1 when there is none. l.mu is held.
func (l *limitListener) fairShare(n *limitConn, held map[netip.Addr]int, reserved bool) int {
	best := -1
	for i, c := range l.conns { // in accept order: the first is the oldest
		if c.reserved == reserved && !c.done && held[c.src] > held[n.src] && !l.protected(c, n, held) &&
			(best < 0 || held[c.src] > held[l.conns[best].src]) {
			best = i
		}
	}
	return best
}

// quiet reports whether c has sent nothing, or idled longer than
// l.idleGrace, such that newcomer n may take its slot (see protected).
// l.mu is held.
func (l *limitListener) quiet(c, n *limitConn, held map[netip.Addr]int) bool {
	switch c.state {
	case http.StateNew:
		return !l.protected(c, n, held)
	case http.StateIdle:
		return time.Since(c.since) >= l.idleGrace
	}
	return false
}

// protected reports whether c keeps its slot against newcomer n for its
// grace: c was accepted less than l.grace ago and has sent nothing yet,
// n is from another source, and c's source would hold no more than n's
// once n is in (a source that opens more connections than others crowds
// itself out: its newest ones are not kept for it). l.mu is held.
func (l *limitListener) protected(c, n *limitConn, held map[netip.Addr]int) bool {
	return c.src != n.src && c.state == http.StateNew && time.Since(c.since) < l.grace &&
		held[c.src] <= held[n.src]+1
}

// source is the remote IP address of c, what the fair share counts by.
func source(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{} // not IP: one source
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
	src   netip.Addr     // remote IP address
	host  bool           // src is one of the node's addresses
	// reserved: c holds one of the node's slots (the shared ones were
	// full when it came); guarded by l.mu
	reserved bool
	done     bool // answered, closing; guarded by l.mu
}

// CloseWrite is called by the server once it has written its last answer
// on c and is closing it: it then waits up to half a second for the
// client's acknowledgement (net/http's RST avoidance) but serves nothing
// more, so c's slot is the first a newcomer takes and c no longer counts
// for its source (a prober's connection per probe would otherwise hold
// slots for its source long after each answer).
func (c *limitConn) CloseWrite() error {
	c.l.mu.Lock()
	c.done = true
	c.l.mu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.remove(c) })
	return err
}
