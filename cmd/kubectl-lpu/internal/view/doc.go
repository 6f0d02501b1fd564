// Package view turns what the API server holds about LPUs into the
// pictures `kubectl lpu` prints: for DRA nodes, the rings read from
// lpu-dra's ResourceSlices (single-LPU arcs give the ring order) with each
// position's holder from the allocated ResourceClaims; for device-plugin
// nodes, the count in allocatable minus what bound pods ask for (the API
// does not show which LPUs). The summary counts how many more 1/2/4/8-arcs
// the cluster can take now.
package view
