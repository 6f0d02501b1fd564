package inventory

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Snapshot is one immutable view of the node's LPUs. Readers share it
// without locks; the store replaces it whole.
type Snapshot struct {
	// Inventory is what discovery returned; nil before the first success.
	Inventory *device.Inventory
	// Err is the last discovery error, nil when the last scan succeeded.
	Err error

	byID   map[string]*device.Device
	majors map[int64]bool    // majors the LPU driver owns (lpu backend only)
	byNum  map[DevNum]string // number of every node of every LPU -> LPU ID
	nums   map[string][]DevNum
}

// DevNum is a device number, what a node opens whatever its path.
type DevNum struct{ Major, Minor int64 }

// Numbers returns the device numbers of every node of an LPU (on Orion the
// render and the management node). The audit and the validator compare
// containers by these sets.
func (s *Snapshot) Numbers(id string) []DevNum { return s.nums[id] }

// Owner returns the LPU one of whose nodes has number n.
func (s *Snapshot) Owner(n DevNum) (string, bool) {
	id, ok := s.byNum[n]
	return id, ok
}

// IsLPUNumber reports whether a character device of number n opens an
// LPU: the number of a node of a discovered LPU, or any minor of a major
// our own driver owns (lpu backend: a node of an LPU that has since gone).
func (s *Snapshot) IsLPUNumber(n DevNum) bool {
	if s.majors[n.Major] {
		return true
	}
	_, ok := s.byNum[n]
	return ok
}

func newSnapshot(inv *device.Inventory, err error) *Snapshot {
	s := &Snapshot{Inventory: inv, Err: err, byID: map[string]*device.Device{}, majors: map[int64]bool{},
		byNum: map[DevNum]string{}, nums: map[string][]DevNum{}}
	if inv == nil {
		return s
	}
	// Only our own driver owns its major: on Orion the render major is
	// DRM's (226, shared with every GPU) and xclmgmt's may be shared too,
	// so there a node is an LPU's only by its exact number.
	ownMajor := inv.Backend == "" || inv.Backend == device.BackendLPU
	for i := range inv.Devices {
		d := &inv.Devices[i]
		s.byID[d.ID] = d
		for _, n := range d.NodeList() {
			if n.Major > 0 || n.Minor > 0 {
				num := DevNum{n.Major, n.Minor}
				s.byNum[num] = d.ID
				s.nums[d.ID] = append(s.nums[d.ID], num)
			}
			if ownMajor && n.Major > 0 {
				s.majors[n.Major] = true
			}
		}
	}
	return s
}

// Ready reports whether discovery has succeeded at least once.
func (s *Snapshot) Ready() bool { return s != nil && s.Inventory != nil }

// Device returns the device with the given ID. The pointer is shared:
// callers must not modify it.
func (s *Snapshot) Device(id string) (*device.Device, bool) {
	d, ok := s.byID[id]
	return d, ok
}

// DriverVersion returns the driver version, "" when unknown.
func (s *Snapshot) DriverVersion() string {
	if s.Inventory == nil {
		return ""
	}
	return s.Inventory.DriverVersion
}

// IsCharType reports whether an OCI device type opens a character device:
// "c", "u" (unbuffered char: runc makes it a char node) or none (the
// runtime reads the type from the host node).
func IsCharType(typ string) bool { return typ == "c" || typ == "u" || typ == "" }

// OwnMajors returns the majors our own driver owns (lpu backend): any
// minor of them opens an LPU, present or gone.
func (s *Snapshot) OwnMajors() []int64 {
	out := make([]int64, 0, len(s.majors))
	for m := range s.majors {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// IsLPUNode reports whether a device node seen in a container is an LPU's:
// a character device with the number of a node of a discovered LPU (any
// of its nodes: on Orion the render and the management node), one with a
// major our own driver owns (lpu backend: a node of an LPU that has since
// gone), or a path /dev/lpuN.
func (s *Snapshot) IsLPUNode(path, typ string, major, minor int64) bool {
	if IsCharType(typ) && s.IsLPUNumber(DevNum{major, minor}) {
		return true
	}
	if rest, ok := strings.CutPrefix(path, device.DevDir+"/"); ok {
		if _, err := device.ParseID(rest); err == nil {
			return true
		}
	}
	return false
}

// Store keeps the current Snapshot in an atomic pointer and refreshes it in
// the background, so request paths never touch the disk.
type Store struct {
	disc     device.Discoverer
	interval time.Duration
	minKick  time.Duration
	log      *slog.Logger
	cur      atomic.Pointer[Snapshot]
	kick     chan struct{}
	notify   []chan struct{}
}

// Options configure a Store; zero fields take the defaults.
type Options struct {
	// Interval spaces the periodic rescans (default
	// config.DefaultResyncInterval).
	Interval time.Duration
	// Logger receives discovery failures; nil discards.
	Logger *slog.Logger
}

// New returns a store over disc. It holds an empty, not-ready snapshot
// until the first Refresh.
func New(disc device.Discoverer, opts Options) *Store {
	s := &Store{disc: disc, interval: cmp.Or(opts.Interval, config.DefaultResyncInterval), minKick: 200 * time.Millisecond,
		log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), kick: make(chan struct{}, 1)}
	s.cur.Store(newSnapshot(nil, errors.New("no discovery yet")))
	return s
}

// Load returns the current snapshot; never nil. It does no I/O.
func (s *Store) Load() *Snapshot { return s.cur.Load() }

// Kick asks the background loop for a rescan soon; it never blocks.
func (s *Store) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Changes returns a channel that receives (without blocking the store) after
// every refresh that changed the device set, health or driver version. Call
// it before Run.
func (s *Store) Changes() <-chan struct{} {
	c := make(chan struct{}, 1)
	s.notify = append(s.notify, c)
	return c
}

// Refresh discovers now and publishes the result. When discovery fails
// because the driver is gone, the snapshot becomes empty (no LPU can be
// injected); on other errors the last good inventory stays, with Err set.
func (s *Store) Refresh(ctx context.Context) (*Snapshot, error) {
	inv, err := s.disc.Discover(ctx)
	prev := s.cur.Load()
	var next *Snapshot
	switch {
	case err == nil:
		next = newSnapshot(inv, nil)
	case errors.Is(err, device.ErrNoDriver):
		next = newSnapshot(&device.Inventory{}, err)
	case ctx.Err() != nil:
		return prev, err
	default:
		next = newSnapshot(prev.Inventory, err)
	}
	s.cur.Store(next)
	if changed(prev, next) {
		s.logChange(next)
		for _, c := range s.notify {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	} else {
		s.log.Debug("reconciled device inventory", "devices", len(next.byID))
	}
	return next, err
}

func (s *Store) logChange(n *Snapshot) {
	if n.Err != nil {
		s.log.Warn("device discovery failed", "err", n.Err, "devices", ids(n))
		return
	}
	var unhealthy []string
	for _, d := range n.Inventory.Devices {
		if !d.Health.Healthy {
			unhealthy = append(unhealthy, d.ID+": "+d.Health.Reason)
		}
	}
	s.log.Info("device inventory changed", "ids", ids(n), "unhealthy", unhealthy,
		"driverVersion", n.Inventory.DriverVersion)
}

func ids(s *Snapshot) []string {
	if s.Inventory == nil {
		return nil
	}
	out := make([]string, 0, len(s.Inventory.Devices))
	for _, d := range s.Inventory.Devices {
		out = append(out, d.ID)
	}
	return out
}

// changed reports whether the parts that matter to injection differ.
func changed(a, b *Snapshot) bool {
	if (a.Err == nil) != (b.Err == nil) || a.Ready() != b.Ready() {
		return true
	}
	if !a.Ready() {
		return false
	}
	ai, bi := a.Inventory, b.Inventory
	if ai.DriverVersion != bi.DriverVersion || len(ai.Devices) != len(bi.Devices) {
		return true
	}
	for i := range ai.Devices {
		if !ai.Devices[i].Equal(&bi.Devices[i]) {
			return true
		}
	}
	return !slices.EqualFunc(ai.Rings, bi.Rings, slices.Equal)
}

// Run rescans every interval and on Kick (at most once per 200ms) until ctx
// is done. It returns nil on cancellation.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
			if wait := s.minKick - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
		last = time.Now()
		_, _ = s.Refresh(ctx)
	}
}
