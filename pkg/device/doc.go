// Package device is the LPU model of a node and its discovery: which LPUs
// exist, their device nodes and numbers, health and telemetry, and how they
// are wired into rings. Package devicesim writes a tree of every layout it
// reads, for tests and nodes without LPUs.
//
// # The model
//
// Discover returns an Inventory: Devices sorted by Index (IDs "lpuN"),
// Rings, DriverVersion and the Backend that found them. Every backend fills
// the same fields, so consumers (device plugin, lpu-nri, CDI, NFD, the DRA
// driver) need not know which one ran.
//
// Device nodes: Device.Nodes is the ordered list of every node a container
// holding the LPU gets, primary first; Path, Major and Minor are always
// Nodes[0]. The lpu and pci backends give one node; the xilinx backend
// gives the render node, then (unless XilinxOptions.NoManagementNodes) the
// management node. Use Device.NodeList, which also covers a Device built
// by hand with only Path/Major/Minor. An unhealthy LPU whose nodes could
// not be found may have none. Device.PCIFunctions lists every PCI function
// of the LPU's card, PCIBusID (the user function on Orion) first. Device
// holds slices, so compare with Device.Equal, not ==.
//
// # Backends
//
// WithDiscovery selects the backend (config discovery.backend):
//
//   - BackendLPU (default): the layout below, defined by this package.
//   - BackendXilinx: AMD/Xilinx Alveo cards under XRT (Orion, 8 × U55C).
//   - BackendPCI: PCI accelerators by vendor and class (Bertha, /dev/haN).
//
// # Layout read under the discovery root (lpu backend)
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
//	/dev/lpuN                       the device node: a character device whose number is dev
//
// Device nodes of every backend must be character devices with the number
// sysfs gives; a regular file may stand in for one only under a root
// carrying the marker that devicesim and devicetest write (never "/"); on
// a real root, "/" or "/host" alike, it is an error.
//
// Every attribute read is bounded (MaxAttrBytes) and trimmed of surrounding
// whitespace.
//
// # Layout of the xilinx backend (Orion)
//
// Under /sys/bus/pci/devices, functions of vendor XilinxOptions.Vendor
// (0x10ee): user functions (device 0x505d; an empty user_pf file and
// driver xocl when bound) and management functions (0x505c; mgmt_pf and
// driver xclmgmt when bound), paired by address without the function
// digit, recognised by device ID whatever their binding. Other functions
// are ignored; an entry whose vendor or device cannot be read is skipped
// with a warning, never an aborted scan.
//
// IDs (both PCI backends) are stable: at the first discovery, the rank of
// each card's address among every card present (on Orion the card address
// DDDD:BB:DD orders like the user functions, the order hyperdex-smi and
// XRT use); then each address keeps its ID, in memory and, with
// WithStateDir, in <stateDir>/device-ids-<backend>.json across restarts.
// A card seen later takes the next ID above every ID given; an ID is never
// given to another card. So a user function that xocl fails to probe, is
// unbound from, or binds late keeps its card's ID (unhealthy: "not bound
// to xocl"), and flashing a management-only card ("no shell flashed": no
// user function on the bus) renumbers nothing. The address → ID map is
// logged when it changes.
//
//	<user>/ready                    0x1 healthy (base prefix allowed)
//	<user>/dev_offline, device_bad_state   0, when present
//	<user>/driver                   link whose basename must be xocl
//	<user>/board_name               Model ("u55c")
//	<user>/numa_node                NUMANode
//	<user>/rom.<x>/VBNV             Firmware: the shell; must equal XilinxOptions.Shell when set
//	<user>/xmc.<x>/serial_num       Serial
//	<user>/xmc.<x>/xmc_fpga_temp    telemetry, °C; else the hwmon named *_user (else the first by number
//	                                with a temp*_input): temp4_input or its first temp*_input, m°C
//	<user>/xmc.<x>/xmc_power        telemetry, µW; an exact 0 (°C, m°C, µW) is missing: XMC reads 0 when
//	                                its mailbox to the management side fails
//	<user>/drm/renderDN/dev         the primary node /dev/dri/renderDN
//	<mgmt>/ready                    1 healthy, when present and the management node is injected
//	<mgmt>/instance                 decimal instance number
//	<mgmt>/xrt_mgmt/xclmgmt<inst>/dev   the node /dev/xclmgmt<inst> (xclmgmt/ in old XRT)
//	/sys/module/xocl/version        DriverVersion, the part before ","
//
// Subdirectories "rom.<x>" and "xmc.<x>" are matched by "<name>." prefix
// (their instance varies with the XRT version; a plain file "rom" may sit
// beside them). Memory total is 16 GiB for u55c; utilisation and memory
// used have no sysfs source and are Missing. Two cards whose management
// functions claim one instance are both unhealthy, naming the address and
// file. Without a network table or rings the ring is address order, with a
// warning that this is right only when the cabling follows it.
//
// # Layout of the pci backend (Bertha)
//
// Functions under /sys/bus/pci/devices with PCIOptions.Vendor (0x1eff) and
// Class (0x120000), IDs by address as above; the node is
// <function>/<ClassDir>/<name>/dev, injected as /dev/<name>. The driver
// numbers nodes in probe order, so an ID never comes from a node name.
// Health: the function is present, the node is right, the optional
// PCIOptions.HealthAttribute holds HealthValue, and PCIOptions.Health (a
// vendor library seam) agrees. Telemetry is all Missing.
//
// # Health
//
// A device is healthy when its dev attribute parses, its status is READY or
// BUSY and its device node is right (lpu backend; the others below). A
// node is right when it is a character device of the number sysfs gives
// and /proc/devices (ProcDevices, under the root; on a real root without
// one, the process's own: the list is global to the kernel) registers its
// major under the driver's name: "lpu" for /dev/lpuN, "drm" for render
// nodes, "xclmgmt" for management nodes, PCIOptions.Driver (default: the
// bound driver) for the pci backend. So dev = 1:1 with /dev/lpu3 = c 1:1
// (that is /dev/mem) is unhealthy. Otherwise Health.Reason says why, e.g.
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
// A token may also be the PCI address (DDDD:BB:DD.F, any case) of either
// function of a discovered LPU's card, so a table keyed by addresses works,
// whichever function it names. An address naming no LPU, or the same link
// twice through the other function, is an error naming the file and line.
//
// The parser runs in phases (ParseNetworkTableFunc): the text format to
// entries, tokens to LPUs, links, rings. Only the first knows the format:
// the schema of the vendor's table_bdf.json is not public, and supporting
// it is meant to be one new function producing the same entries.
//
// Rings come out in a canonical order: each ring starts at its lowest-indexed
// LPU and continues toward the lower-indexed of that LPU's two neighbours;
// rings are sorted by their first LPU. So "lpu0 lpu1 … lpu7 lpu0" yields
// lpu0, lpu1, …, lpu7.
//
// # Example
//
//	inv, err := device.NewSysfs("/").Discover(ctx)
//	if err != nil {
//		return err
//	}
//	for _, d := range inv.Devices {
//		fmt.Println(d.ID, d.Path, d.Health.Healthy) // lpu0 /dev/lpu0 true
//	}
//	fmt.Println(inv.Rings) // [[lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7]]
package device
