// Package podresources owns the connection to the kubelet's PodResources
// socket (API v1): made on first use, shared by concurrent callers, closed
// once. What each daemon asks over it (the holders of every device, the
// devices of one container) stays with that daemon.
//
//	c := podresources.New("/var/lib/kubelet/pod-resources/kubelet.sock")
//	defer c.Close()
//	l, err := c.Lister()
//	rsp, err := l.List(ctx, &podresv1.ListPodResourcesRequest{})
package podresources
