// Package plugin is lpu-device-plugin's kubelet side: the device plugin API
// v1beta1 served on <kubelet-dir>/lpu.sock, and the registration loop that
// keeps resource hyperaccel.ai/lpu registered with the kubelet.
//
// # The service
//
//   - ListAndWatch sends the device list (health, NUMA node) from the
//     health monitor's snapshot and a new list on every change.
//   - GetPreferredAllocation asks pkg/alloc for a ring-contiguous arc among
//     the healthy available devices. It never fails: an error there fails
//     pods with UnexpectedAdmissionError.
//   - Allocate re-checks what the kubelet chose: unknown, unhealthy or
//     duplicate IDs are refused; a set that is not one arc on one ring is
//     refused under policy strict and accepted (and counted) under
//     best-effort. In nri mode the answer is only annotations: the IDs in
//     ring order with their seal, and a fresh allocation ID sealed to them
//     (pkg/inject) that names this call's Allocate span (pkg/trace), so
//     lpu-nri's CreateContainer span can link to it. In cdi mode: CDI
//     device names, the cdi.k8s.io/ annotation for kubelets before 1.28,
//     and the set-wide LPU_VISIBLE_DEVICES.
//   - PreStartContainer in nri mode refuses unless lpu-nri reports on its
//     readiness socket (pkg/ready) that it is connected to the runtime.
//
// Served over a CordonSource, the LPUs an operator cordoned (pkg/cordon,
// the Node annotation) are Unhealthy with reason "cordoned", so the
// kubelet stops offering them and Allocate refuses them; until the Node
// was read, every LPU is (fail closed).
//
// Nothing depends on earlier Allocate calls: the kubelet checkpoints and
// replays responses across restarts.
//
// # Registration
//
// Run serves a fresh socket and registers it; it does so again within a
// second when kubelet.sock is created anew, when the plugin's socket is
// removed (a restarting kubelet deletes every socket in its directory) or
// when the kubelet closes the ListAndWatch stream, and retries with bounded
// backoff while no kubelet answers.
//
//	p, err := plugin.New(monitor, plugin.Options{
//		ResourceName: "hyperaccel.ai/lpu", KubeletDir: "/var/lib/kubelet/device-plugins",
//		StateDir: "/var/lib/lpu", Injection: config.InjectionNRI,
//		Policy: config.PolicyBestEffort, Key: key,
//	})
//	err = p.Run(ctx)
package plugin
