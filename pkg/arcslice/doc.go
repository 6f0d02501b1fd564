// Package arcslice turns a node's LPU inventory into the DRA ResourceSlices
// of one pool, so that the kube-scheduler hands out ring-contiguous arcs.
//
// # The arc model
//
// Every ring gets one counter set (named "ring<R>") with one counter per
// LPU (named by the LPU ID, value 1). Every arc of every ring — each size
// 1..n-1 at each start, and the whole ring once — is a device that consumes
// exactly its LPUs' counters, so the allocator can never hand out two
// overlapping arcs. A device is named "ring<R>-start<S>-size<K>" (DeviceName,
// ParseDeviceName) and carries, in the driver's domain lpu.hyperaccel.ai:
//
//	size (int), ring (int), start (int), lpus (string, IDs in ring order,
//	comma-joined), model, driverVersion, firmware (string), numaNode (int),
//	recentFaults (int, 0 unless Builder.WithFaults says otherwise),
//	countPath (bool, false)
//
// Every LPU also has a count device, "ring<R>-start<S>-count"
// (CountDeviceName; ParseDeviceName gives its single arc): its single
// arc's counter and attributes with countPath true. The chart's class with
// extendedResourceName hyperaccel.ai/lpu selects them, so a pod's plain
// hyperaccel.ai/lpu: k takes the first k free ones in published order,
// which Builder.CountOrder makes the longest free run first.
//
// and resource.kubernetes.io/pcieRoot when the PCIe root of its LPUs is
// known. An attribute whose value differs between the arc's LPUs, or is
// unknown, is left out; so is lpus when the joined IDs exceed the API's
// 64-byte limit for string attributes (an arc of more than about ten LPUs:
// ring, start and size still name its LPUs).
//
// # Layout and limits
//
// The API allows only one of sharedCounters or devices per slice, 64
// devices per slice when counters are consumed, 8 counter sets per slice
// and 32 counters per set. Builder.Slices puts the devices first, the arcs
// in the order alloc.ArcOrder gives for the LPUs held now, then the count
// devices in CountOrder, 64 to a slice, then the
// counter sets, 8 to a slice. The resourceslice controller names slices by
// their index, and the allocator takes the first device that fits in slice
// name then device order, so the published order is the priority order.
// Builder.FreeSlices, what lpu-dra publishes, is the same without the arcs
// that touch a held LPU and are not themselves allocated: the allocator
// could not give them out, and the scheduler need not read them. A
// ring longer than 32 LPUs is an error naming the ring, never a slice the API
// server would reject.
//
// # Health
//
// An arc holding an unhealthy LPU keeps its place but carries the taint
// lpu.hyperaccel.ai/unhealthy=<LPU ID>:NoSchedule, so the scheduler stops
// allocating it while pods already running on it stay; the taint goes away
// when the LPU recovers. Taints (rather than removing the devices) keep the
// reason visible in the slice and the device names stable.
package arcslice
