package podresources

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hyperaccel/lpu-node/internal/sockettest"
)

// kubelet answers List with one pod, over a real unix socket.
type kubelet struct {
	podresv1.UnimplementedPodResourcesListerServer
}

func (kubelet) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	return &podresv1.ListPodResourcesResponse{PodResources: []*podresv1.PodResources{{Name: "trainer", Namespace: "team"}}}, nil
}

// serve starts the kubelet on path and returns its stop function.
func serve(t *testing.T, path string) func() {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresv1.RegisterPodResourcesListerServer(srv, kubelet{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return srv.Stop
}

func list(t *testing.T, c *Conn) error {
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
			c := New(sock)
			defer c.Close()
			serve(t, sock)
			if err := list(t, c); err != nil {
				t.Fatal(err)
			}
		},
		"no kubelet: the call fails, not Lister": func(t *testing.T, sock string) {
			c := New(sock)
			defer c.Close()
			if err := list(t, c); err == nil {
				t.Fatal("List without a kubelet succeeded")
			}
		},
		"one connection for concurrent callers": func(t *testing.T, sock string) {
			serve(t, sock)
			c := New(sock)
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
			serve(t, sock)
			c := New(sock)
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
			stop := serve(t, sock)
			c := New(sock)
			defer c.Close()
			if err := list(t, c); err != nil {
				t.Fatal(err)
			}
			stop()
			os.Remove(sock)
			serve(t, sock)
			// The call that finds the old connection gone may fail; the
			// same Conn must recover without being remade.
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
			sock := filepath.Join(sockettest.ShortDir(t), "kubelet.sock")
			run(t, sock)
		})
	}
	if got := New("/x/kubelet.sock").Socket(); got != "/x/kubelet.sock" {
		t.Fatalf("Socket() = %q", got)
	}
}
