// Package device is the LPU model of a node and its discovery: which LPUs
// exist, their device numbers, health and telemetry, and how they are wired
// into rings. It also writes a simulated node with the same layout.
//
// # Layout read under the discovery root
//
// No driver specification is public, so this package defines the layout and
// keeps it in one place. Paths are host paths; Sysfs reads them under its
// root ("/" on a host, "/host" in a container, a temp dir in tests), and
// everything it reports (Device.Path, health reasons) names them as the host
// sees them, never under the root.
//
//	/sys/class/lpu/lpuN/            one entry per LPU (directory or link); other names are ignored
//	    dev                         "MAJOR:MINOR" in decimal (see ParseDev); never stat the node
//	    status                      READY or BUSY (healthy), anything else is an error word
//	    serial, firmware_version    free text
//	    model                       free text, the product name (e.g. "HyperAccel LPU"); optional
//	    numa_node                   -1 or the node; missing means -1
//	    device                      link to the PCI function; its basename is the bus ID
//	    ring_id, ring_position      optional ring attributes (see Topology)
//	    utilization_percent         telemetry: 0..100, fraction allowed
//	    memory_used_bytes           telemetry: unsigned integer
//	    memory_total_bytes          telemetry: unsigned integer
//	    temperature_millicelsius    telemetry: integer (42500 = 42.5 °C)
//	    power_microwatts            telemetry: unsigned integer (28000000 = 28 W)
//	/sys/module/lpu/version         driver version
//	/dev/lpuN                       the device node; only its existence is checked (lstat)
//
// Every attribute read is bounded (MaxAttrBytes) and trimmed of surrounding
// whitespace.
//
// # Health
//
// A device is healthy when its dev attribute parses, its status is READY or
// BUSY and its device node exists. Otherwise Health.Reason says why, e.g.
// `status "ECC_ERROR"` or "device node /dev/lpu3 missing"; several reasons
// are joined with "; ". A broken device is reported unhealthy, never dropped,
// and does not stop discovery of the others. Discover fails (wrapping
// ErrNoDriver) only when /sys/class/lpu itself is missing, or when the
// topology input is invalid. ProbeHealth re-reads just what decides health.
//
// # Topology
//
// Rings come from the first source whose input exists (TopologyAuto), or
// from the one source WithTopologySource forces (its input missing is then
// an error):
//
//  1. explicit rings (WithRings), kept in the order given; every ID must be
//     discovered, appear once, and every discovered LPU must be on a ring;
//  2. the vendor network table (WithNetworkTable), read under the root;
//  3. the ring_id and ring_position attributes: all LPUs have both or none;
//     the positions of a ring are 0..n-1 with no gap or duplicate; rings are
//     ordered by ring_id. An unhealthy LPU whose attributes are missing or
//     unreadable (a broken device) goes on a ring of its own, last, so it
//     cannot break the topology of the others;
//  4. one ring of all LPUs in index order.
//
// Any source that exists but is invalid is an error naming the bad input;
// discovery never silently falls through to a weaker source. A node may
// hold several rings; every LPU is on exactly one.
//
// # Network table format
//
// A text file, one link per line between two LPUs that are neighbours on a
// ring. "#" starts a comment; blank lines are ignored:
//
//	# rack 3, node 7: two rings of four
//	lpu0 lpu1
//	lpu1 lpu2
//	lpu2 lpu3
//	lpu3 lpu0
//	lpu4 lpu5   # links are undirected: "lpu5 lpu4" is the same link
//	lpu5 lpu6
//	lpu6 lpu7
//	lpu7 lpu4
//
// The links must form disjoint cycles: every LPU has exactly two distinct
// neighbours. Two special cases: a ring of two is a single link between two
// LPUs that have no other link, and a ring of one is a line naming one LPU
// alone. Self links, duplicate links, a third link, a dangling chain, a
// malformed ID or line, an LPU not discovered on the node, or a discovered
// LPU missing from the table are errors naming the file and line.
//
// Rings come out in a canonical order: each ring starts at its lowest-indexed
// LPU and continues toward the lower-indexed of that LPU's two neighbours;
// rings are sorted by their first LPU. So "lpu0 lpu1 … lpu7 lpu0" yields
// lpu0, lpu1, …, lpu7.
//
// # Simulated node
//
// Simulate writes this layout, plus the network table at
// DefaultNetworkTable and driver placeholders, under a directory; device
// nodes are plain files. SimulatedRoot names the directory a daemon run with
// --simulate uses. Existing status and telemetry files are never
// overwritten, so flipped statuses survive daemon restarts.
//
// # Example
//
//	root := device.SimulatedRoot("/var/lib/lpu")
//	if err := device.Simulate(root, device.SimSpec{Devices: 8, Rings: 1}); err != nil {
//		return err
//	}
//	inv, err := device.NewSysfs(root).Discover(ctx)
//	if err != nil {
//		return err
//	}
//	for _, d := range inv.Devices {
//		fmt.Println(d.ID, d.Path, d.Health.Healthy) // lpu0 /dev/lpu0 true
//	}
//	fmt.Println(inv.Rings) // [[lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7]]
package device
