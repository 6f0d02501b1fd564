// Package node assembles what every lpu-node command builds first, once
// and the same way: the discovery root, the discoverer, the injection
// options with the driver mounts resolved, the health monitor's options,
// the node name and the seal key bound to it. lpu-device-plugin, lpu-nri and lpu-dra open it at
// the top of their Run; lpu-nri's cdi generate, cdi list and doctor too.
//
// The mounts are the reason it exists: when the root is a marked tree
// (device.TreePath), a mount whose host path the tree carries (its driver
// library and tool) is injected from that tree, never from the host, whichever daemon renders it (an NRI
// adjustment, the node's CDI spec, a claim's CDI spec).
//
// The node name and the seal key are read lazily: only commands that seal
// or open allocations (the device plugin in nri injection, lpu-nri in NRI
// mode) call SealKey, and a bad NODE_NAME fails only them.
//
//	n, err := node.Open(cfg, node.Options{Logger: log, Kubelet: true})
//	if err != nil {
//		return err
//	}
//	mon := health.New(n.Discoverer, n.HealthOptions())
//	key, err := n.SealKey() // NODE_NAME's key; only where seals are made or opened
//	drv, err := driver.New(mon, driver.Options{Inject: n.Inject, ...})
package node
