package podres

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hyperaccel/lpu-node/internal/sockettest"
)

const resource = "hyperaccel.ai/lpu"

// kubelet is a PodResources server over a real unix socket, built from the
// kubelet's own API package.
type kubelet struct {
	podresv1.UnimplementedPodResourcesListerServer
	pods    []*podresv1.PodResources
	withGet bool
	gets    atomic.Int32
	lists   atomic.Int32
	delay   time.Duration
}

func (k *kubelet) List(ctx context.Context, _ *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	k.lists.Add(1)
	if k.delay > 0 {
		select {
		case <-time.After(k.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &podresv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *kubelet) Get(_ context.Context, req *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	k.gets.Add(1)
	if !k.withGet {
		return nil, status.Error(codes.Unimplemented, "PodResourcesGet feature gate off")
	}
	for _, p := range k.pods {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &podresv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.PodNamespace, req.PodName)
}

func serve(t *testing.T, k *kubelet) string {
	t.Helper()
	dir := sockettest.ShortDir(t)
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresv1.RegisterPodResourcesListerServer(srv, k)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}

func pods() []*podresv1.PodResources {
	return []*podresv1.PodResources{
		{Name: "trainer", Namespace: "team", Containers: []*podresv1.ContainerResources{
			{Name: "main", Devices: []*podresv1.ContainerDevices{
				{ResourceName: "example.com/nic", DeviceIds: []string{"nic0"}},
				{ResourceName: resource, DeviceIds: []string{"lpu3", "lpu2"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "trainer", Namespace: "other", Containers: []*podresv1.ContainerResources{
			{Name: "main", Devices: []*podresv1.ContainerDevices{{ResourceName: resource, DeviceIds: []string{"lpu0"}}}},
		}},
	}
}

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		ns, pod, ctr string
		ids          []string
		wantMismatch bool
	}{
		"same set, other order":    {"team", "trainer", "main", []string{"lpu2", "lpu3"}, false},
		"subset":                   {"team", "trainer", "main", []string{"lpu2"}, true},
		"superset":                 {"team", "trainer", "main", []string{"lpu2", "lpu3", "lpu4"}, true},
		"other namespace's device": {"team", "trainer", "main", []string{"lpu0"}, true},
		"container without lpus":   {"team", "trainer", "sidecar", []string{"lpu2"}, true},
		"unknown container":        {"team", "trainer", "nope", []string{"lpu2"}, true},
		"matches in namespace":     {"other", "trainer", "main", []string{"lpu0"}, false},
	}
	for _, withGet := range []bool{true, false} {
		k := &kubelet{pods: pods(), withGet: withGet}
		c := New(serve(t, k), resource)
		defer c.Close()
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := c.Check(ctx, tc.ns, tc.pod, tc.ctr, tc.ids)
				if tc.wantMismatch != errors.Is(err, ErrMismatch) || (!tc.wantMismatch && err != nil) {
					t.Fatalf("withGet=%v: Check = %v, want mismatch %v", withGet, err, tc.wantMismatch)
				}
			})
		}
		if withGet && k.lists.Load() != 0 {
			t.Fatalf("List called %d times although Get is implemented", k.lists.Load())
		}
		if !withGet && (k.gets.Load() != 1 || k.lists.Load() == 0) {
			t.Fatalf("without Get: %d Get calls (want 1, then List only), %d List calls", k.gets.Load(), k.lists.Load())
		}
	}
}

func TestCheckUnavailable(t *testing.T) {
	dir := sockettest.ShortDir(t)
	c := New(filepath.Join(dir, "missing.sock"), resource)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.Check(ctx, "team", "trainer", "main", []string{"lpu2"})
	if err == nil || errors.Is(err, ErrMismatch) {
		t.Fatalf("Check without a kubelet = %v, want a connection error", err)
	}
}

func TestCheckTimeout(t *testing.T) {
	k := &kubelet{pods: pods(), delay: 5 * time.Second}
	c := New(serve(t, k), resource)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Check(ctx, "team", "trainer", "main", []string{"lpu2", "lpu3"}); err == nil {
		t.Fatal("Check against a hung kubelet succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Check took %v, want it bounded by ctx", d)
	}
}
