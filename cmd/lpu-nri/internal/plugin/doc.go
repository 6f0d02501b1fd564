// Package plugin is lpu-nri's NRI adapter: it registers with the
// container runtime (Runner, reconnecting with bounded backoff and driving
// the readiness signal), hands each CreateContainer and
// ValidateContainerAdjustment to the trust rules of
// cmd/lpu-nri/internal/verify, turns their answer into the runtime's
// adjustment or refusal, counts it, and keeps the periodic audit
// (cmd/lpu-nri/internal/audit) and the replay ledger current from the
// container and pod lifecycle events.
//
//	p, _ := plugin.New(plugin.Config{Config: verify.Config{Key: key, Store: store}, Ready: readySrv})
//	r := &plugin.Runner{Plugin: p, Name: "lpu", Index: "10", Socket: "/var/run/nri/nri.sock"}
//	err := r.Run(ctx) // returns when ctx is done
package plugin
