// Package publish keeps lpu-dra's ResourceSlices and node labels current:
// the node's ring arcs (pkg/arcslice) in the order pkg/alloc would pick
// them now, computed from the device state, the prepared claims (package
// state) and the LPUs device-plugin pods hold. Arcs holding an unhealthy
// LPU carry a NoSchedule taint; the free arcs pkg/alloc prefers come
// first. It republishes after every change of the held LPUs or of device
// health, and when the other pod of a rolling update saved the
// checkpoint.
package publish
