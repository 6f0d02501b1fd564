package podresources

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
)

// serveOne starts the kubelet on path, answering List with one pod.
func serveOne(t *testing.T, path string) *podresourcestest.Server {
	t.Helper()
	k := podresourcestest.Start(t, path)
	k.SetPodResources([]*podresv1.PodResources{{Name: "trainer", Namespace: "team"}})
	return k
}

func list(t *testing.T, c *Client) error {
	t.Helper()
	l, err := c.Lister()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rsp, err := l.List(ctx, &podresv1.ListPodResourcesRequest{})
	if err == nil && (len(rsp.GetPodResources()) != 1 || rsp.GetPodResources()[0].GetName() != "trainer") {
		t.Fatalf("List = %v", rsp)
	}
	return err
}

func TestConn(t *testing.T) {
	tests := map[string]func(t *testing.T, sock string){
		"lazy: the kubelet may come after New": func(t *testing.T, sock string) {
			c := New(sock, "hyperaccel.ai/lpu")
			defer c.Close()
			serveOne(t, sock)
			if err := list(t, c); err != nil {
				t.Fatal(err)
			}
		},
		"no kubelet: the call fails, not Lister": func(t *testing.T, sock string) {
			c := New(sock, "hyperaccel.ai/lpu")
			defer c.Close()
			if err := list(t, c); err == nil {
				t.Fatal("List without a kubelet succeeded")
			}
		},
		"one connection for concurrent callers": func(t *testing.T, sock string) {
			serveOne(t, sock)
			c := New(sock, "hyperaccel.ai/lpu")
			defer c.Close()
			var wg sync.WaitGroup
			listers := make([]podresv1.PodResourcesListerClient, 8)
			for i := range listers {
				wg.Go(func() {
					l, err := c.Lister()
					if err != nil {
						t.Error(err)
					}
					listers[i] = l
				})
			}
			wg.Wait()
			for _, l := range listers[1:] {
				if l != listers[0] {
					t.Fatal("Lister returned different clients")
				}
			}
		},
		"reconnects after Close": func(t *testing.T, sock string) {
			serveOne(t, sock)
			c := New(sock, "hyperaccel.ai/lpu")
			if err := list(t, c); err != nil {
				t.Fatal(err)
			}
			first, _ := c.Lister()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := list(t, c); err != nil {
				t.Fatalf("after Close: %v", err)
			}
			if again, _ := c.Lister(); again == first {
				t.Fatal("Lister after Close reused the closed client")
			}
			c.Close()
		},
		"kubelet restart": func(t *testing.T, sock string) {
			k := serveOne(t, sock)
			c := New(sock, "hyperaccel.ai/lpu")
			defer c.Close()
			if err := list(t, c); err != nil {
				t.Fatal(err)
			}
			k.Stop()
			serveOne(t, sock)
			// The call that finds the old connection gone may fail; the
			// same Client must recover without being remade.
			deadline := time.Now().Add(5 * time.Second)
			for err := list(t, c); err != nil; err = list(t, c) {
				if time.Now().After(deadline) {
					t.Fatalf("after kubelet restart: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		},
	}
	for name, run := range tests {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(daemontest.ShortDir(t), "kubelet.sock")
			run(t, sock)
		})
	}
	if got := New("/x/kubelet.sock", "hyperaccel.ai/lpu").Socket(); got != "/x/kubelet.sock" {
		t.Fatalf("Socket() = %q", got)
	}
}
