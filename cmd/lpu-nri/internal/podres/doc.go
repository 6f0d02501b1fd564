// Package podres cross-checks an allocation against the kubelet's
// PodResources API: the device IDs kubelet assigned to a container for the
// LPU resource must equal the IDs in its sealed annotation. It asks Get for
// the one pod and falls back to List when the kubelet does not implement Get
// (the KubeletPodResourcesGet feature gate is off).
//
//	c := podres.New("/var/lib/kubelet/pod-resources/kubelet.sock", "hyperaccel.ai/lpu")
//	defer c.Close()
//	err := c.Check(ctx, "team", "trainer-0", "main", []string{"lpu2", "lpu3"})
package podres
