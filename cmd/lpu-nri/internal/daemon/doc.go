// Package daemon wires lpu-nri's parts on the node (internal/node: the
// discoverer, the injected mounts, the seal key) and runs them: the
// NRI plugin with its reconnect loop, inventory refresh, readiness socket
// and metrics endpoint (NRI mode), or the CDI spec syncer (CDI mode); and
// the one-shot commands cdi generate, cdi list and doctor.
//
//	err := daemon.Run(ctx, daemon.Params{Config: cfg, Mode: "nri", Logger: log})
package daemon
