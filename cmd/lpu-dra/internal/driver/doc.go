// Package driver is lpu-dra's kubelet DRA plugin, the adapter between the
// kubelet plugin helper and the node's state: PrepareResourceClaims and
// UnprepareResourceClaims check each claim against the rules that need no
// state (our pool, no opaque config, the owner pod of a generated claim,
// our DeviceClasses), hand it to package state (checkpoint, CDI specs,
// LPU refusals) and ask package publish to republish after a change.
//
// It also keeps what it learns outside the checkpoint, under its one
// mutex: which LPUs device-plugin pods hold (the kubelet's PodResources,
// WatchDevicePlugin), which the state refuses and the publisher leaves
// out, and the names of the claims' pods (Holders, for telemetry). Beside
// it: the claims' status.devices queued on package statuswriter
// (WithStatus), per-arc health reports and the lpu_dra_* metrics.
package driver
