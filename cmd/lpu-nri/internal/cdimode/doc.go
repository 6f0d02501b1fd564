// Package cdimode keeps the node's CDI spec for kind hyperaccel.ai/lpu in
// step with discovery, for runtimes without NRI: it renders the spec with
// pkg/inject, writes it atomically only when it changed, removes stale specs
// of our kind under other file names, and lists the device names a runtime
// resolves.
//
//	s := &cdimode.Syncer{Discoverer: device.NewSysfs("/"), Dir: "/var/run/cdi"}
//	changed, err := s.Sync(ctx)   // once (lpu-nri cdi generate)
//	err = s.Run(ctx)              // keep in sync (lpu-nri --mode cdi)
package cdimode
