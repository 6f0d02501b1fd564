package podresources

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Client asks a kubelet's PodResources socket about one resource
// (hyperaccel.ai/lpu) over a connection made lazily and shared. Safe for
// concurrent use.
type Client struct {
	socket   string
	resource string
	noGet    atomic.Bool // Get answered Unimplemented: use List from now on

	mu     sync.Mutex
	conn   *grpc.ClientConn
	lister podresv1.PodResourcesListerClient
}

// New returns a client for resource on the PodResources socket at path
// (as this process sees it). Nothing is dialed until the first call.
func New(socket, resource string) *Client {
	return &Client{socket: socket, resource: resource}
}

// Socket returns the socket path, for error messages.
func (c *Client) Socket() string { return c.socket }

// Lister returns the v1 client, making the connection on first use (and
// again after Close). gRPC dials in the background and redials when the
// kubelet restarts; a kubelet that is not there shows as an error of the
// call, not here.
func (c *Client) Lister() (podresv1.PodResourcesListerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lister != nil {
		return c.lister, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+c.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.socket)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("pod resources client %s: %w", c.socket, err)
	}
	c.conn, c.lister = conn, podresv1.NewPodResourcesListerClient(conn)
	return c.lister, nil
}

// Close closes the connection, if one was made.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.lister = nil, nil
	return err
}
