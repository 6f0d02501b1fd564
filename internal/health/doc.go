// Package health keeps a daemon's view of the node's LPUs current:
// the inventory from discovery and, for each device, the health the daemon
// reports to the kubelet (lpu-device-plugin, lpu-dra).
//
// A Monitor rescans on file events (fsnotify on the paths the Source names:
// the sysfs class directory, each device's directory, /dev), on a periodic
// resync, and re-probes every device's health on a short poll because real
// sysfs rarely sends inotify events. A flip is damped: a device is reported
// unhealthy only after FailureThreshold consecutive bad probes spaced by
// ProbeInterval, and healthy again after RecoveryThreshold good ones. A
// device that disappears is confirmed the same way before it leaves the
// list. Readers take an immutable Snapshot and wait for the next one:
//
//	m := health.New(device.NewSysfs("/"), health.Options{})
//	go m.Run(ctx)
//	for {
//		snap, changed := m.Snapshot()
//		use(snap.Inventory, snap.Layout)
//		<-changed
//	}
package health
