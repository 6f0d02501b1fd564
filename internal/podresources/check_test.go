package podresources

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
)

const resource = "hyperaccel.ai/lpu"

func serve(t *testing.T, pods []*podresv1.PodResources) *podresourcestest.Server {
	t.Helper()
	k := podresourcestest.Start(t, filepath.Join(daemontest.ShortDir(t), "kubelet.sock"))
	k.SetPodResources(pods)
	return k
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
		k := serve(t, pods())
		if withGet {
			k.EnableGet()
		}
		c := New(k.Socket, resource)
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
		if withGet && k.Lists() != 0 {
			t.Fatalf("List called %d times although Get is implemented", k.Lists())
		}
		if !withGet && (k.Gets() != 1 || k.Lists() == 0) {
			t.Fatalf("without Get: %d Get calls (want 1, then List only), %d List calls", k.Gets(), k.Lists())
		}
	}
}

func TestCheckUnavailable(t *testing.T) {
	dir := daemontest.ShortDir(t)
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
	k := serve(t, pods())
	k.SetDelay(5 * time.Second)
	c := New(k.Socket, resource)
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
