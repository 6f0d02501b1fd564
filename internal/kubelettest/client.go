package kubelettest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Client is the kubelet's side of one device plugin endpoint: a gRPC
// connection to the plugin socket and the DevicePlugin client the kubelet's
// device manager uses on it.
type Client struct {
	pluginapi.DevicePluginClient
	conn *grpc.ClientConn
}

// Dial connects to a device plugin socket; the connection closes when the
// test ends.
func Dial(t testing.TB, socket string) *Client {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Client{DevicePluginClient: pluginapi.NewDevicePluginClient(conn), conn: conn}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Stream is one ListAndWatch stream, received in the background the way the
// kubelet's endpoint does.
type Stream struct {
	cancel context.CancelFunc
	lists  chan []*pluginapi.Device
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// Watch opens ListAndWatch and receives device lists until the test ends or
// Close is called (the kubelet closing its stream).
func (c *Client) Watch(t testing.TB) *Stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lw, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		cancel()
		t.Fatalf("ListAndWatch: %v", err)
	}
	s := &Stream{cancel: cancel, lists: make(chan []*pluginapi.Device, 256), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.lists)
		for {
			resp, err := lw.Recv()
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			s.lists <- resp.GetDevices()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close ends the stream from the kubelet's side.
func (s *Stream) Close() {
	s.cancel()
	<-s.done
}

// Err is the error that ended the stream, nil while it is open.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Next returns the next device list, failing the test when none arrives
// within timeout or the stream ends.
func (s *Stream) Next(t testing.TB, timeout time.Duration) []*pluginapi.Device {
	t.Helper()
	select {
	case l, ok := <-s.lists:
		if !ok {
			t.Fatalf("ListAndWatch ended: %v", s.Err())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("no ListAndWatch update within %v", timeout)
		return nil
	}
}

// WaitFor returns the first list (including already received ones) for
// which ok returns true, failing the test at the deadline with the last
// list seen.
func (s *Stream) WaitFor(t testing.TB, timeout time.Duration, what string, ok func([]*pluginapi.Device) bool) []*pluginapi.Device {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var last []*pluginapi.Device
	for {
		select {
		case l, open := <-s.lists:
			if !open {
				t.Fatalf("waiting for %s: ListAndWatch ended: %v (last list %s)", what, s.Err(), Format(last))
			}
			last = l
			if ok(l) {
				return l
			}
		case <-deadline.C:
			t.Fatalf("waiting for %s: not seen within %v (last list %s)", what, timeout, Format(last))
			return nil
		}
	}
}

// Health maps device ID to health for a list.
func Health(devs []*pluginapi.Device) map[string]string {
	m := make(map[string]string, len(devs))
	for _, d := range devs {
		m[d.GetID()] = d.GetHealth()
	}
	return m
}

// Format renders a device list as "lpu0=Healthy,lpu1=Unhealthy" sorted by ID.
func Format(devs []*pluginapi.Device) string {
	parts := make([]string, 0, len(devs))
	for _, d := range devs {
		parts = append(parts, fmt.Sprintf("%s=%s", d.GetID(), d.GetHealth()))
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, ",") + "]"
}
