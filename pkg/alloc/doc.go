// Package alloc chooses which LPUs serve a request so that jobs get ring
// neighbours and the node stays able to serve later requests.
//
// It owns the allocation policy only and uses the standard library only: a
// Layout holds the ring topology of one node (device IDs in ring order, one
// slice per ring) and works on ring positions. Discovery (pkg/device) builds
// the rings; the device plugin calls Preferred from GetPreferredAllocation
// and Check from Allocate.
//
// # Preferred
//
// Candidates are arcs of size consecutive positions on one ring, wrap-around
// arcs included, whose devices are all available and which cover the
// must-include devices. Every candidate is scored by what it leaves on the
// node, and the winner leaves the most power-of-two arcs (free space in the
// shapes 1, 2, 4, 8 … requests take), then the longest free arc, then the
// fewest free segments, then has a power-of-two aligned start, then the
// lowest ring and position. The fragmentation lab (lab/sim) chose this order;
// lab/notebooks/sim.md has the numbers. When no arc fits,
// Preferred still answers, with the available set that forms the fewest
// segments (staying on one ring when possible); it returns nil only when the
// request cannot be met at all.
//
// # Check
//
// Check orders a set that kubelet chose along its ring and reports whether
// it is one contiguous arc, and why not, for the best-effort and strict
// allocation policies.
//
// # ArcOrder
//
// ArcOrder lists every arc of the layout (each size at each start, a whole
// ring once) in the order Preferred would pick them given the devices held
// now. The DRA driver publishes its devices in this order, because the
// Kubernetes allocator takes the first device that fits; lab/sim's
// dra policy and the driver's tests use the same function.
//
// # Example
//
//	l, err := alloc.NewLayout([][]string{{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}})
//	if err != nil {
//		return err
//	}
//	ids := l.Preferred([]string{"lpu0", "lpu1", "lpu5", "lpu6", "lpu7"}, nil, 3)
//	// ids == [lpu5 lpu6 lpu7]: leaves lpu0,lpu1 whole
//	p, _ := l.Check([]string{"lpu1", "lpu7", "lpu0"})
//	// p.IDs == [lpu7 lpu0 lpu1], p.Contiguous == true
package alloc
