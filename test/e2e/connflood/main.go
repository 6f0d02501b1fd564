// Command connflood plays a pod that floods a daemon's metrics port with
// idle TCP connections, for the e2e security scenarios. It opens --conns
// connections (raw and silent, or --keepalive: one HTTP/1.1 request each,
// then idle), and reports as key=value lines how many the server kept, how
// many it reset or closed and when, the daemon's resident memory (--pid)
// and whether a fresh /metrics request was answered while they were held.
// Only the e2e uses it.
//
//	connflood --addr 127.0.0.1:9100 --conns 2000 --hold 1s --watch 15s --pid 1234
//	connflood --addr 127.0.0.1:9101 --conns 32 --keepalive --watch 40s
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "connflood:", err)
		os.Exit(1)
	}
}

// closeKind is how the server ended one connection.
type closeKind int

const (
	closedEOF closeKind = iota + 1
	closedReset
	closedOther
)

type conn struct {
	c      net.Conn
	mu     sync.Mutex
	kind   closeKind
	closed time.Time
}

func (c *conn) state() (closeKind, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kind, c.closed
}

// watch blocks on a read until the server ends the connection; a silent
// server keeps it blocked, which is what "held" means.
func (c *conn) watch(r io.Reader) {
	buf := make([]byte, 512)
	var err error
	for err == nil {
		_, err = r.Read(buf)
	}
	k := closedOther
	switch {
	case errors.Is(err, io.EOF):
		k = closedEOF
	case errors.Is(err, syscall.ECONNRESET):
		k = closedReset
	}
	c.mu.Lock()
	c.kind, c.closed = k, time.Now()
	c.mu.Unlock()
}

func run(args []string) error {
	fs := flag.NewFlagSet("connflood", flag.ContinueOnError)
	addr := fs.String("addr", "", "the daemon's metrics `HOST:PORT`")
	n := fs.Int("conns", 2000, "connections to open")
	keepalive := fs.Bool("keepalive", false, "send one GET /healthz per connection, read the answer, then stay idle")
	hold := fs.Duration("hold", time.Second, "how long after the last dial to count what the server kept")
	watchFor := fs.Duration("watch", 15*time.Second, "how long to wait for the server to close the held connections")
	pid := fs.Int("pid", 0, "the daemon's `PID`, to sample its VmRSS")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *n <= 0 {
		return fmt.Errorf("--addr and a positive --conns are required")
	}
	rss := newSampler(*pid)
	defer rss.stop()
	fmt.Printf("rss_before_kib=%d\n", rss.before)

	conns, dialErrs := dialAll(*addr, *n)
	start := time.Now()
	failed := 0
	for _, v := range dialErrs {
		failed += v
	}
	fmt.Printf("dialed=%d dial_errors=%d dial_refused=%d dial_reset=%d dial_timeout=%d dial_other=%d dial_ms=%d\n",
		len(conns), failed, dialErrs["refused"], dialErrs["reset"], dialErrs["timeout"], dialErrs["error"], time.Since(rss.t0).Milliseconds())
	occupy(conns, *keepalive)
	time.Sleep(*hold)
	alive, eof, reset, other := count(conns)
	fmt.Printf("held=%d eof=%d reset=%d other=%d after_s=%.1f\n", alive, eof, reset, other, time.Since(start).Seconds())
	fmt.Printf("probe_while_held=%s\n", probe(*addr))
	waitClosed(conns, start.Add(*watchFor))
	alive, eof, reset, other = count(conns)
	last := lastClose(conns)
	// last_close_s counts from the end of dialing (keep-alive requests are
	// sent then), last_close_dial_s from its start (when the first, held,
	// silent connections were accepted)
	lastS, lastDialS := 0.0, 0.0
	if !last.IsZero() {
		lastS, lastDialS = last.Sub(start).Seconds(), last.Sub(rss.t0).Seconds()
	}
	fmt.Printf("end_held=%d end_eof=%d end_reset=%d end_other=%d last_close_s=%.2f last_close_dial_s=%.2f\n",
		alive, eof, reset, other, lastS, lastDialS)
	fmt.Printf("rss_peak_kib=%d\n", rss.stop())
	fmt.Printf("probe_after=%s\n", probe(*addr))
	for _, c := range conns {
		_ = c.c.Close()
	}
	return nil
}

// occupy sends one GET /healthz on every connection and reads the answer
// (keepalive), or else starts watching each for the server's close.
func occupy(conns []*conn, keepalive bool) {
	if !keepalive {
		for _, c := range conns {
			go c.watch(c.c)
		}
		return
	}
	answered := 0
	for _, c := range conns {
		if request(c) {
			answered++
		}
	}
	fmt.Printf("keepalive_answered=%d\n", answered)
}

// waitClosed polls until the server closed every connection or deadline
// passed.
func waitClosed(conns []*conn, deadline time.Time) {
	for time.Now().Before(deadline) {
		if a, _, _, _ := count(conns); a == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastClose is when the last closed connection closed, zero when none did.
func lastClose(conns []*conn) time.Time {
	var last time.Time
	for _, c := range conns {
		if k, t := c.state(); k != 0 && t.After(last) {
			last = t
		}
	}
	return last
}

// dialAll opens n connections, 100 at a time so the server's accept loop
// keeps up with the kernel's backlog.
func dialAll(addr string, n int) ([]*conn, map[string]int) {
	var (
		mu    sync.Mutex
		conns []*conn
		errs  = map[string]int{}
	)
	for done := 0; done < n; {
		batch := min(100, n-done)
		var wg sync.WaitGroup
		for range batch {
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", addr, 3*time.Second)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs[errClass(err)]++
					return
				}
				conns = append(conns, &conn{c: c})
			})
		}
		wg.Wait()
		done += batch
	}
	return conns, errs
}

// request sends one keep-alive request on c and reads the answer; then c
// is watched for the server's close like a silent connection.
func request(c *conn) bool {
	_ = c.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c.c, "GET /healthz HTTP/1.1\r\nHost: lpu-e2e\r\n\r\n"); err != nil {
		go c.watch(c.c)
		return false
	}
	br := bufio.NewReader(c.c)
	rsp, err := http.ReadResponse(br, nil)
	ok := err == nil && rsp.StatusCode == http.StatusOK
	if err == nil {
		_, _ = io.Copy(io.Discard, rsp.Body)
		_ = rsp.Body.Close()
	}
	_ = c.c.SetDeadline(time.Time{})
	go c.watch(br)
	return ok
}

func count(conns []*conn) (alive, eof, reset, other int) {
	for _, c := range conns {
		switch k, _ := c.state(); k {
		case 0:
			alive++
		case closedEOF:
			eof++
		case closedReset:
			reset++
		default:
			other++
		}
	}
	return alive, eof, reset, other
}

// probe is one fresh GET /metrics: "200", another status, or why it failed.
func probe(addr string) string {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	rsp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return errClass(err)
	}
	_, _ = io.Copy(io.Discard, rsp.Body)
	_ = rsp.Body.Close()
	return strconv.Itoa(rsp.StatusCode)
}

// sampler reads a process's VmRSS every 50 ms and keeps the peak.
type sampler struct {
	pid    int
	t0     time.Time
	before int
	mu     sync.Mutex
	peak   int
	done   chan struct{}
	once   sync.Once
}

func newSampler(pid int) *sampler {
	s := &sampler{pid: pid, t0: time.Now(), done: make(chan struct{})}
	s.before = vmRSS(pid)
	s.peak = s.before
	if pid > 0 {
		go s.loop()
	}
	return s
}

func (s *sampler) loop() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			v := vmRSS(s.pid)
			s.mu.Lock()
			s.peak = max(s.peak, v)
			s.mu.Unlock()
		}
	}
}

// stop ends sampling and returns the peak (KiB).
func (s *sampler) stop() int {
	s.once.Do(func() { close(s.done) })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// vmRSS is pid's resident set in KiB from /proc, 0 when unknown.
func vmRSS(pid int) int {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kib, _ := strconv.Atoi(f[0])
				return kib
			}
		}
	}
	return 0
}

// errClass names a dial or request failure: refused, reset, eof, timeout
// or error.
func errClass(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF):
		return "eof"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	fmt.Fprintln(os.Stderr, "connflood:", err)
	return "error"
}
