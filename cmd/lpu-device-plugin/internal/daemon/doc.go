// Package daemon assembles lpu-device-plugin on the node (internal/node:
// discovery and the seal key) from its parts — the
// health monitor, the kubelet device plugin, the metrics endpoint and the
// NFD feature file — and runs them until the context ends.
//
//	err := daemon.Run(ctx, daemon.Params{Config: cfg, Options: opts, Logger: log, Version: version})
package daemon
