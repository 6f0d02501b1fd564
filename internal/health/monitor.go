package health

import (
	"cmp"
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/logchange"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Source is what the monitor reads devices from; *device.Sysfs in
// production and in tests (on a fake tree).
type Source interface {
	Discover(ctx context.Context) (*device.Inventory, error)
	ProbeHealth(id string) device.Health
	WatchPaths() []string
}

var _ Source = (*device.Sysfs)(nil)

// debounceDelay coalesces bursts of file events into one rescan.
const debounceDelay = 20 * time.Millisecond

// goneReason is the health reason of a device discovery no longer finds.
const goneReason = "device no longer discovered"

// Options configure a Monitor. Zero values take the config's defaults
// (config.DefaultResyncInterval, ...).
type Options struct {
	// ResyncInterval spaces full rediscoveries (devices appearing and
	// going, topology) when no file event arrives.
	ResyncInterval time.Duration
	// PollInterval spaces cheap health re-probes of every known device
	// (real sysfs rarely sends inotify events for attribute changes, so this
	// is what keeps health changes under a second on hardware). Negative
	// disables polling.
	PollInterval time.Duration
	// ProbeInterval spaces the re-probes that confirm a pending flip.
	ProbeInterval time.Duration
	// FailureThreshold and RecoveryThreshold are the consecutive probes
	// needed to report a device unhealthy, or healthy again.
	FailureThreshold, RecoveryThreshold int
	// Logger receives state changes at info and one "reconciled device
	// inventory" record per scan at debug.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.ResyncInterval = cmp.Or(o.ResyncInterval, config.DefaultResyncInterval)
	o.PollInterval = cmp.Or(o.PollInterval, config.DefaultPollInterval)
	o.ProbeInterval = cmp.Or(o.ProbeInterval, config.DefaultProbeInterval)
	o.FailureThreshold = cmp.Or(o.FailureThreshold, config.DefaultFailureThreshold)
	o.RecoveryThreshold = cmp.Or(o.RecoveryThreshold, config.DefaultRecoveryThreshold)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	return o
}

// Snapshot is the device state the monitor reports. It is immutable: a
// change publishes a new Snapshot.
type Snapshot struct {
	// Inventory holds the devices with their reported (damped) health,
	// sorted by index; never nil, empty before the first discovery.
	Inventory *device.Inventory
	// Layout is the ring layout of Inventory.Rings; nil only when the
	// rings are invalid (logged).
	Layout *alloc.Layout
	// Err is the last discovery error, nil when the last scan succeeded.
	Err error
	// Generation counts published snapshots, starting at 1 after the
	// first scan.
	Generation uint64
}

// Monitor keeps the device inventory and its damped health current: it
// rescans on file events (fsnotify on Source.WatchPaths), every
// ResyncInterval, re-probes health every PollInterval, and confirms flips
// with re-probes ProbeInterval apart. Readers take Snapshot and wait on the
// returned channel for the next one.
type Monitor struct {
	src  Source
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	snap    Snapshot
	changed chan struct{}

	ready     chan struct{}
	readyOnce sync.Once

	// Owned by the Run goroutine.
	damp    *damper
	gone    map[string]bool // vanished devices still reported while confirming
	pending bool
	lastErr error // the last discovery error, published as Snapshot.Err
	errs    logchange.Errors
	watcher *fsnotify.Watcher
	watched map[string]bool
}

// New returns a monitor of src; call Run to start it.
func New(src Source, opts Options) *Monitor {
	opts = opts.withDefaults()
	empty, _ := alloc.NewLayout(nil)
	return &Monitor{
		src:     src,
		opts:    opts,
		log:     opts.Logger,
		snap:    Snapshot{Inventory: &device.Inventory{}, Layout: empty},
		changed: make(chan struct{}),
		ready:   make(chan struct{}),
		damp:    newDamper(opts.FailureThreshold, opts.RecoveryThreshold),
		gone:    make(map[string]bool),
		watched: make(map[string]bool),
	}
}

// Snapshot returns the current state and a channel closed when a newer
// snapshot replaces it.
func (m *Monitor) Snapshot() (Snapshot, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap, m.changed
}

// Ready is closed once the first scan finished (successful or not).
func (m *Monitor) Ready() <-chan struct{} { return m.ready }

// Run scans once, then keeps the inventory current until ctx ends. It
// returns nil on cancellation; discovery errors are logged and retried,
// never returned.
func (m *Monitor) Run(ctx context.Context) error {
	events, errs, unwatch := m.watch()
	defer unwatch()
	m.scan(ctx)
	m.readyOnce.Do(func() { close(m.ready) })

	resync := time.NewTicker(m.opts.ResyncInterval)
	defer resync.Stop()
	pollC, stopPoll := ticker(m.opts.PollInterval)
	defer stopPoll()
	confirm := time.NewTimer(m.opts.ProbeInterval)
	confirm.Stop()
	confirmArmed := false
	debounce := time.NewTimer(debounceDelay)
	debounce.Stop()
	debounceArmed := false

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			m.fileEvent(ev, debounceArmed)
			if !debounceArmed {
				debounce.Reset(debounceDelay)
				debounceArmed = true
			}
			continue
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			m.log.Debug("file watch error", "err", err)
			continue
		case <-debounce.C:
			debounceArmed = false
			m.scan(ctx)
		case <-resync.C:
			m.scan(ctx)
		case <-pollC:
			if !m.pending {
				m.probe(ctx)
			}
		case <-confirm.C:
			confirmArmed = false
			m.followUp(ctx)
		}
		if m.pending && !confirmArmed {
			confirm.Reset(m.opts.ProbeInterval)
			confirmArmed = true
		}
	}
}

// watch starts the file watcher and returns its channels and its stop;
// without one (nil channels), the rescans carry on alone.
func (m *Monitor) watch() (<-chan fsnotify.Event, <-chan error, func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		m.log.Warn("file watching unavailable, relying on periodic rescans", "err", err)
		return nil, nil, func() {}
	}
	m.watcher = w
	return w.Events, w.Errors, func() { _ = w.Close() }
}

// ticker ticks every d, never when d is not positive.
func ticker(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// fileEvent forgets the watch of a removed or renamed path (the kernel
// dropped it; scan re-adds it when the path returns) and logs the first
// event of a burst.
func (m *Monitor) fileEvent(ev fsnotify.Event, inBurst bool) {
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		delete(m.watched, ev.Name)
	}
	if !inBurst {
		m.log.Debug("device file event", "path", ev.Name, "op", ev.Op.String())
	}
}

// followUp follows up a pending change: a rescan while an LPU is gone,
// another probe otherwise.
func (m *Monitor) followUp(ctx context.Context) {
	if len(m.gone) > 0 {
		m.scan(ctx)
	} else {
		m.probe(ctx)
	}
}

// scan rediscovers the node and reconciles it with what is reported.
func (m *Monitor) scan(ctx context.Context) {
	inv, err := m.src.Discover(ctx)
	if err != nil {
		if m.errs.Note(err) == logchange.Failed {
			m.log.Warn("device discovery failed, keeping the last inventory", "err", err)
		}
		m.lastErr = err
		m.probe(ctx) // health still moves for the devices we know
		return
	}
	if m.errs.Note(nil) == logchange.Recovered {
		m.log.Info("device discovery recovered")
	}
	m.lastErr = nil
	prev := m.current().Inventory
	pending := false
	present := make(map[string]bool, len(inv.Devices))
	devs := make([]device.Device, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		h, p := m.damp.observe(d.ID, d.Health)
		d.Health = h
		pending = pending || p
		present[d.ID] = true
		delete(m.gone, d.ID)
		devs = append(devs, d)
	}
	rings := slices.Clone(inv.Rings)
	for _, old := range prev.Devices {
		if present[old.ID] {
			continue
		}
		h, p := m.damp.observe(old.ID, device.Health{Reason: goneReason})
		if !p {
			m.damp.forget(old.ID)
			delete(m.gone, old.ID)
			continue
		}
		// Not confirmed yet: keep reporting it, on a ring of its own so
		// that nothing is allocated across it.
		old.Health = h
		m.gone[old.ID] = true
		pending = true
		devs = append(devs, old)
		rings = append(rings, []string{old.ID})
	}
	slices.SortFunc(devs, func(a, b device.Device) int { return cmp.Compare(a.Index, b.Index) })
	m.pending = pending
	next := &device.Inventory{Devices: devs, Rings: rings, DriverVersion: inv.DriverVersion}
	m.publish(next, nil)
	m.syncWatches()
	m.log.Debug("reconciled device inventory",
		"devices", len(devs), "healthy", len(next.HealthyIDs()), "rings", len(rings), "pending", pending)
}

// probe re-probes the health of every known device without rediscovery and
// publishes it with the last discovery error. A device the last scan no
// longer found counts as a failed probe: when discovery keeps failing (the
// driver went away after the device) no scan can confirm its removal, and
// it must not stay reported healthy.
func (m *Monitor) probe(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	snap := m.current()
	devs := slices.Clone(snap.Inventory.Devices)
	pending := false
	for i, d := range devs {
		raw := device.Health{Reason: goneReason}
		if !m.gone[d.ID] {
			raw = m.src.ProbeHealth(d.ID)
		}
		h, p := m.damp.observe(d.ID, raw)
		devs[i].Health = h
		pending = pending || p
	}
	m.pending = pending
	next := *snap.Inventory
	next.Devices = devs
	m.publish(&next, m.lastErr)
}

func (m *Monitor) current() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap
}

// publish replaces the snapshot when inv or the error differ from it,
// logging each device-level change once.
func (m *Monitor) publish(inv *device.Inventory, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.snap
	if old.Generation > 0 && reflect.DeepEqual(old.Inventory, inv) && errText(old.Err) == errText(err) {
		return
	}
	if old.Generation == 0 {
		m.log.Info("device inventory discovered", "devices", len(inv.Devices), "healthy", len(inv.HealthyIDs()),
			"rings", inv.Rings, "driver", inv.DriverVersion)
		for _, d := range inv.Devices {
			if !d.Health.Healthy {
				m.log.Info("device unhealthy", "device", d.ID, "reason", d.Health.Reason)
			}
		}
	} else {
		m.logChanges(old.Inventory, inv)
	}
	layout := old.Layout
	if old.Generation == 0 || !reflect.DeepEqual(old.Inventory.Rings, inv.Rings) {
		l, lerr := alloc.NewLayout(inv.Rings)
		if lerr != nil {
			m.log.Error("invalid ring layout, refusing allocations", "err", lerr, "rings", inv.Rings)
		}
		layout = l
	}
	m.snap = Snapshot{Inventory: inv, Layout: layout, Err: err, Generation: old.Generation + 1}
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Monitor) logChanges(old, cur *device.Inventory) {
	before := make(map[string]device.Device, len(old.Devices))
	for _, d := range old.Devices {
		before[d.ID] = d
	}
	for _, d := range cur.Devices {
		o, ok := before[d.ID]
		delete(before, d.ID)
		switch {
		case !ok:
			m.log.Info("device added", "device", d.ID, "healthy", d.Health.Healthy, "reason", d.Health.Reason, "numa", d.NUMANode)
		case o.Health.Healthy != d.Health.Healthy:
			m.log.Info("device health changed", "device", d.ID, "healthy", d.Health.Healthy, "reason", d.Health.Reason)
		}
	}
	for id := range before {
		m.log.Info("device removed", "device", id)
	}
	if !reflect.DeepEqual(old.Rings, cur.Rings) && len(cur.Rings) > 0 {
		m.log.Info("ring layout changed", "rings", cur.Rings)
	}
}

// syncWatches makes the fsnotify watch set equal Source.WatchPaths.
func (m *Monitor) syncWatches() {
	if m.watcher == nil {
		return
	}
	want := make(map[string]bool)
	for _, p := range m.src.WatchPaths() {
		want[p] = true
		if m.watched[p] {
			continue
		}
		if err := m.watcher.Add(p); err != nil {
			m.log.Debug("cannot watch path", "path", p, "err", err)
			continue
		}
		m.watched[p] = true
	}
	for p := range m.watched {
		if !want[p] {
			_ = m.watcher.Remove(p) // already gone when the directory was deleted
			delete(m.watched, p)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
