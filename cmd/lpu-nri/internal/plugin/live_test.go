package plugin

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// freezableConn stands for a lpu-nri that is frozen (SIGSTOP): while
// frozen, reads from the runtime's connection are held back, so the
// plugin does not see the runtime close it.
type freezableConn struct {
	net.Conn
	mu     sync.Mutex
	thawed chan struct{} // nil while not frozen
}

func (c *freezableConn) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.thawed = make(chan struct{})
}

func (c *freezableConn) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thawed != nil {
		close(c.thawed)
		c.thawed = nil
	}
}

func (c *freezableConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	ch := c.thawed
	c.mu.Unlock()
	if ch != nil {
		<-ch // the bytes (or the close) arrived while frozen: seen on thaw
	}
	return n, err
}

// TestReadinessProvesConnection: the readiness socket answers "connected"
// only while the runtime's connection is open now, not because lpu-nri
// remembers being synchronized. A lpu-nri frozen while the runtime closes
// its connection (past the plugin timeout) records "connected" until it
// reads the close; before, the device plugin's PreStartContainer passed
// in that gap and the container started without its LPUs.
func TestReadinessProvesConnection(t *testing.T) {
	rt := nritest.New(t)
	rs, err := ready.Listen(ready.Path(rt.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	f := newFixture(t, 8, false, func(c *Config) { c.Ready = rs })

	var mu sync.Mutex
	var conns []*freezableConn
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{Plugin: f.p, Name: "lpu", Index: "10", Socket: rt.Socket, Log: discard,
		Backoff: backoff.Steps{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		wrapConn: func(c net.Conn) net.Conn {
			fc := &freezableConn{Conn: c}
			mu.Lock()
			conns = append(conns, fc)
			mu.Unlock()
			return fc
		}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	current := func() *freezableConn {
		mu.Lock()
		defer mu.Unlock()
		return conns[len(conns)-1]
	}
	defer func() {
		current().thaw()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	}()

	rt.Start(t)
	rt.WaitPlugins(t, 1)
	waitReady(t, rt.Dir, nil)

	// Frozen, and the runtime closes the connection meanwhile.
	frozen := current()
	frozen.freeze()
	rt.Stop()
	time.Sleep(100 * time.Millisecond) // the close reaches the socket
	if !f.p.Connected() {
		t.Fatal("the frozen plugin saw the close: the test does not reproduce the gap")
	}
	if err := ready.Check(context.Background(), ready.Path(rt.Dir)); !errors.Is(err, ready.ErrNotConnected) {
		t.Fatalf("readiness while the plugin still records a connection the runtime closed = %v, want ErrNotConnected", err)
	}

	// Thawed, it sees the close, reconnects once the runtime is back, and
	// only then is ready again.
	frozen.thaw()
	waitReady(t, rt.Dir, ready.ErrNotConnected)
	rt.Start(t)
	rt.WaitPlugins(t, 1)
	waitReady(t, rt.Dir, nil)
	if current() == frozen {
		t.Fatal("ready again on the old connection")
	}
}
