// Package reservations keeps the pods of lpu-dra's prepared claims equal to
// the apiserver's claim status.reservedFor. The kubelet prepares a claim
// once per node, so a pod that joins a shared claim later (a second
// consumer, a Deployment's replacement pod) reaches no driver call; this
// package learns of it from a pod informer limited to the node
// (spec.nodeName), reads the claims such a pod names that are prepared
// here, one GET each, and re-reads every prepared claim on a slow resync.
// While the apiserver is away nothing changes: the pods already recorded
// keep being served and no new pod is added.
package reservations
