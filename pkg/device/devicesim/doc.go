// Package devicesim writes simulated LPU nodes: a tree under a directory
// in the layout a discovery backend of package device reads, with plain
// files for device nodes, and device.TreeMarker, which lets
// discovery accept those files. lpu-nri simulate writes one (WriteNode,
// the node SpecFor(N) describes) for the daemons to be given as their
// root; the e2e's simnode writes one for real character devices to
// replace; tests discover them.
//
// # Layouts
//
// Write writes device's lpu layout (its package documentation), plus the
// network table at device.DefaultNetworkTable, a matching /proc/devices
// and driver placeholders (Library, Tool). With Spec.Backend
// device.BackendXilinx it writes an Orion node instead (cards on buses 17
// 18 31 32 b1 b2 ca cb, instance numbers that are not 0, a plain rom file
// beside rom.u.*, another vendor's device and a management-only function
// of another Xilinx model as distractors, and a network table keyed by
// PCI addresses whose ring does not follow address order: 0 2 4 6 7 5 3
// 1), optionally with cards in a Fault state; with device.BackendPCI a
// Bertha node (nodes numbered in reverse probe order, a same-vendor
// function of another class).
//
// Write is idempotent and safe to run from two processes at once: every
// file is replaced atomically and only when it differs. Existing status
// and telemetry files are never overwritten, so flipped statuses survive
// daemon restarts; LPUs of an earlier, larger node are removed.
//
// The file names are the drivers' own, written here rather than taken
// from device's discovery code, so the tests that discover a simulated
// tree check the writer against the reader.
//
// # Example
//
//	root := "/var/lib/lpu/simulated-node"
//	if err := devicesim.Write(root, devicesim.Spec{Devices: 8, Rings: 1}); err != nil {
//		return err
//	}
//	inv, err := device.NewSysfs(root).Discover(ctx)
//	if err != nil {
//		return err
//	}
//	fmt.Println(inv.Rings) // [[lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7]]
package devicesim
