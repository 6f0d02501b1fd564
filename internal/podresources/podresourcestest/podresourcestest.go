// Package podresourcestest is the kubelet's PodResources service (API v1)
// on a real unix socket for tests, built from the kubelet's own API
// package: List and, when enabled, Get answer with the pods set.
//
//	k := podresourcestest.Start(t, filepath.Join(dir, "kubelet.sock"))
//	k.SetPods(podresourcestest.Holding{Namespace: "ml", Pod: "p", Container: "c",
//		Resource: "hyperaccel.ai/lpu", DeviceIDs: []string{"lpu2"}})
package podresourcestest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Server is the fake kubelet's PodResources service.
type Server struct {
	podresv1.UnimplementedPodResourcesListerServer

	// Socket is the socket path it serves on.
	Socket string

	srv  *grpc.Server
	done chan struct{}

	mu          sync.Mutex
	pods        []*podresv1.PodResources
	withGet     bool
	delay       time.Duration
	lists, gets int
}

// Start serves on socket until the test ends (or Stop). Get answers
// Unimplemented, as with the kubelet's KubeletPodResourcesGet gate off,
// until EnableGet.
func Start(t testing.TB, socket string) *Server {
	t.Helper()
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listen %s: %v", socket, err)
	}
	s := &Server{Socket: socket, srv: grpc.NewServer(), done: make(chan struct{})}
	podresv1.RegisterPodResourcesListerServer(s.srv, s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop stops serving (a kubelet going away); it is safe to call twice.
func (s *Server) Stop() {
	s.srv.Stop()
	<-s.done
}

// Holding is one container holding devices of a resource.
type Holding struct {
	Namespace, Pod, Container string
	Resource                  string
	DeviceIDs                 []string
}

// SetPods replaces what List and Get answer: one pod per holding.
func (s *Server) SetPods(holdings ...Holding) {
	var pods []*podresv1.PodResources
	for _, h := range holdings {
		pods = append(pods, &podresv1.PodResources{
			Name:      h.Pod,
			Namespace: h.Namespace,
			Containers: []*podresv1.ContainerResources{{
				Name:    h.Container,
				Devices: []*podresv1.ContainerDevices{{ResourceName: h.Resource, DeviceIds: h.DeviceIDs}},
			}},
		})
	}
	s.SetPodResources(pods)
}

// SetPodResources replaces what List and Get answer with pods as given.
func (s *Server) SetPodResources(pods []*podresv1.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

// EnableGet makes Get answer (the KubeletPodResourcesGet gate on).
func (s *Server) EnableGet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.withGet = true
}

// SetDelay makes List wait d (or until the caller gives up) before it
// answers: a hung kubelet.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Lists returns how many List calls were served.
func (s *Server) Lists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// Gets returns how many Get calls were answered, Unimplemented included.
func (s *Server) Gets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// List answers with the pods set.
func (s *Server) List(ctx context.Context, _ *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	s.lists++
	pods, delay := s.pods, s.delay
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &podresv1.ListPodResourcesResponse{PodResources: pods}, nil
}

// Get answers with the named pod, or Unimplemented until EnableGet.
func (s *Server) Get(_ context.Context, req *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if !s.withGet {
		return nil, status.Error(codes.Unimplemented, "PodResourcesGet feature gate off")
	}
	for _, p := range s.pods {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &podresv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.PodNamespace, req.PodName)
}
