// Package kubelettest is the kubelet's side of the device plugin protocol,
// built from the k8s.io/kubelet v1beta1 types, for tests
// of lpu-device-plugin over real unix sockets.
//
// It owns two peers (the PodResources side is
// internal/podresources/podresourcestest):
//
//   - Kubelet: the Registration service on <dir>/kubelet.sock; records every
//     RegisterRequest and can Restart like a kubelet does (deleting every
//     socket in the directory, then creating kubelet.sock again);
//   - Client: dials a plugin socket and calls GetDevicePluginOptions,
//     ListAndWatch (as a background Stream), GetPreferredAllocation,
//     Allocate and PreStartContainer, as the kubelet's device manager does.
//
// Example:
//
//	dir := daemontest.ShortDir(t)
//	k := kubelettest.Start(t, dir)
//	// start the plugin with kubelet dir = dir
//	req := k.WaitRegistration(t, 5*time.Second)
//	c := k.Dial(t, req)
//	s := c.Watch(t)
//	devs := s.Next(t, time.Second)
package kubelettest
