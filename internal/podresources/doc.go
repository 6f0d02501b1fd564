// Package podresources is the daemons' one client of the kubelet's
// PodResources socket (API v1), for one resource: the connection is made
// on first use, shared by concurrent callers, and closed once. The device
// plugin asks which container holds each device (Holders, for metric
// labels); lpu-nri cross-checks one container's devices against its
// sealed allocation (Check: Get for the one pod, List when the kubelet
// does not implement Get). podresourcestest is the fake kubelet side.
//
//	c := podresources.New("/var/lib/kubelet/pod-resources/kubelet.sock", "hyperaccel.ai/lpu")
//	defer c.Close()
//	holders, err := c.Holders(ctx)
//	err = c.Check(ctx, "team", "trainer-0", "main", []string{"lpu2", "lpu3"})
package podresources
