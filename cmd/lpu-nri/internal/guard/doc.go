// Package guard is the runtime guard (security.runtimeGuard): the last
// check before an LPU container's process exists, made by the OCI runtime
// itself, so it holds on runtimes that create a container without lpu-nri.
//
// containerd before 2.2 (NRI without validators) closes a plugin that
// outlives its request timeout and creates the container without the
// plugin's adjustment: a lpu-nri frozen or starved inside CreateContainer
// lets an LPU container start bare. The guard closes that:
//
//   - lpu-nri writes a CDI spec of kind hyperaccel.ai/lpu-guard whose one
//     device, "verified", carries a createRuntime hook: "lpu-nri guard
//     --state-dir DIR", from a copy of lpu-nri installed under the state
//     directory (the host sees it at the same path);
//   - the device plugin requests that CDI device for every container it
//     allocates LPUs to, so the runtime adds the hook whether or not
//     lpu-nri answers;
//   - lpu-nri's adjustment of a verified container adds the annotation
//     lpu.hyperaccel.ai/verified, an HMAC of the container's ID under the
//     node's seal key (inject.Key.VerifiedToken);
//   - the hook, run by runc before the container's process exists, reads
//     the container's ID and annotations from the state on its stdin and
//     fails unless the annotation is the right one. A container the
//     runtime created without lpu-nri's adjustment (lpu-nri down, frozen,
//     timed out) has none and does not start; the kubelet creates it
//     again, through lpu-nri.
//
// The hook reads only local files (the state, the seal key, at most the
// bundle's config.json), so it ends in milliseconds, far inside the
// timeout it is given; it does not ask lpu-nri, so a lpu-nri that verified
// a container and then stopped does not keep that container from starting.
//
//	path, err := guard.Install(stateDir)           // lpu-nri at start
//	changed, err := guard.WriteSpec(cdiDir, path, stateDir)
//	err = guard.Check(os.Stdin, stateDir)          // lpu-nri guard, as the hook
package guard
