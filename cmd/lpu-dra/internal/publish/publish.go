package publish

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/faults"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Sink takes the pool: kubeletplugin.Helper in production.
type Sink interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// LabelSetter takes the labels to keep on the node (nodelabel.Keeper).
type LabelSetter interface {
	Set(labels map[string]string)
}

// DevicePlugin is what publishing asks of the LPUs device-plugin pods
// hold (the kubelet's PodResources, read by the driver).
type DevicePlugin interface {
	// Known says whether PodResources answered once (or is not read).
	Known() bool
	// Held lists the LPUs device-plugin pods hold, sorted.
	Held() []string
}

// Cordon is the node's cordoned LPUs (cordon.Watcher): LPUs an operator
// took out of service.
type Cordon interface {
	// Snapshot returns the cordoned LPU IDs (read-only) and a channel
	// closed when they or Known change.
	Snapshot() (map[string]bool, <-chan struct{})
	// Known says whether the IDs are the Node's (read once): until
	// then every LPU is published as cordoned, so a restart never offers
	// an LPU that is cordoned for the moment before the first read.
	Known() bool
}

// Options configure a Publisher.
type Options struct {
	NodeName string // the pool name
	// PCIeRoot resolves a PCI bus ID to its PCIe root; nil leaves the
	// attribute out.
	PCIeRoot func(pciBusID string) string
	// ArcSizes are the arc sizes published (config dra.arcSizes); empty
	// publishes every arc.
	ArcSizes []int
	// FollowInterval is how often Run looks for checkpoint changes made
	// by another instance; 0 means 1 s.
	FollowInterval time.Duration
	// NodeLabels gets, at every publication, the node labels of what a
	// new claim could still be given (arcslice.Free.Labels, computed from
	// the published view); nil: the Node is not labelled.
	NodeLabels LabelSetter
	// Published is called after each publication handed to the sink;
	// nil: not called.
	Published func()
	// Faults is the LPUs' fault history: every publication records the
	// LPUs that turned unhealthy, and each arc's recentFaults attribute
	// counts its LPUs' faults in the window. Nil: every arc publishes 0.
	Faults *faults.Log
	// Cordoned are the LPUs no new claim may get: every arc holding one
	// is published last with an arcslice.CordonTaintKey taint, and the
	// node labels count them as taken; a change republishes. Nil: none.
	Cordoned Cordon
	Logger   *slog.Logger
}

// Publisher computes and publishes the node's pool.
type Publisher struct {
	opts    Options
	devices state.Devices
	claims  *state.State
	dp      DevicePlugin
	log     *slog.Logger

	kick chan struct{} // a republish is due

	mu       sync.Mutex // guards the builder cache
	builder  *arcslice.Builder
	shapeKey string
}

// New returns the publisher of the pool of devices, the prepared claims in
// claims and the LPUs dp says device-plugin pods hold.
func New(devices state.Devices, claims *state.State, dp DevicePlugin, opts Options) *Publisher {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{opts: opts, devices: devices, claims: claims, dp: dp, log: log, kick: make(chan struct{}, 1)}
}

// Republish asks Run for a new publication; it never blocks.
func (p *Publisher) Republish() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Resources returns what the node's pool should hold now: the arcs no
// prepared claim touches plus the arcs prepared claims were given, in the
// order pkg/alloc would pick them, unhealthy and cordoned arcs tainted
// (arcslice.Builder.FreeSlices, WithCordoned). It fails when the inventory cannot be
// published (a ring longer than a counter set holds), naming the ring.
func (p *Publisher) Resources() (resourceslice.DriverResources, error) {
	res, _, err := p.resources()
	return res, err
}

// resources is Resources and, from the same view, the node labels' values:
// what a new claim could still be given, never below what a prepared
// claim holds (arcslice.Free.Holding).
func (p *Publisher) resources() (resourceslice.DriverResources, arcslice.Free, error) {
	snap, _ := p.devices.Snapshot()
	inv := snap.Inventory
	if inv == nil {
		inv = &device.Inventory{}
	}
	b, err := p.builderFor(inv)
	if err != nil {
		return resourceslice.DriverResources{}, arcslice.Free{}, err
	}
	if p.opts.Cordoned != nil {
		b = b.WithCordoned(p.cordoned(inv))
	}
	// Held LPUs and allocated arcs from one read of the checkpoint (the
	// other driver pod of a rolling update may have changed it).
	s := p.claims.Current()
	held := append(s.Held(), p.dp.Held()...)
	if !p.dp.Known() {
		// Fail closed: until PodResources answers, any LPU may be a
		// device-plugin pod's, so none is offered (allocated arcs stay).
		for _, dev := range inv.Devices {
			held = append(held, dev.ID)
		}
	}
	sick := arcslice.Unhealthy(inv)
	sl := b.WithFaults(b.FreeSlices(held, allocatedArcs(s, p.opts.NodeName), sick), p.faultCounts(sick))
	if len(sl) == 0 {
		// A node without LPUs still publishes its pool, empty: "no
		// devices" is news, "no pool" is not.
		sl = []resourceslice.Slice{{}}
	}
	free := b.Free(held, sick)
	for _, c := range s.Claims {
		free = free.Holding(claimArcs(c, p.opts.NodeName))
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		p.opts.NodeName: {Slices: sl},
	}}, free, nil
}

// cordoned is the cordon source's set, or every LPU of inv while the
// source has not read the Node (fail closed, as for the device plugin).
func (p *Publisher) cordoned(inv *device.Inventory) map[string]bool {
	set, _ := p.opts.Cordoned.Snapshot()
	if p.opts.Cordoned.Known() {
		return set
	}
	all := make(map[string]bool, len(inv.Devices))
	for _, dev := range inv.Devices {
		all[dev.ID] = true
	}
	return all
}

// faultCounts records the LPUs of sick that turned unhealthy and returns
// every LPU's faults in the window; nil without a history.
func (p *Publisher) faultCounts(sick map[string]bool) map[string]int {
	if p.opts.Faults == nil {
		return nil
	}
	if _, err := p.opts.Faults.Observe(sick); err != nil {
		// The history in memory still counts; only a restart would
		// forget what this save lost.
		p.log.Warn("cannot save the fault history", "err", err)
	}
	return p.opts.Faults.Counts()
}

// expiry is when the next fault leaves the history's window, which
// changes an arc's recentFaults: the timer's next duration, and false
// when no fault is in the window.
func (p *Publisher) expiry() (time.Duration, bool) {
	if p.opts.Faults == nil {
		return 0, false
	}
	return p.opts.Faults.NextExpiry()
}

// allocatedArcs returns the arcs of pool that the prepared claims of s were
// given, admin claims included: they must stay published while allocated.
func allocatedArcs(s *checkpoint.State, pool string) []alloc.Arc {
	var out []alloc.Arc
	for _, c := range s.Claims {
		out = append(out, claimArcs(c, pool)...)
	}
	return out
}

// claimArcs returns the arcs of pool that prepared claim c was given. A
// device name that is not an arc is skipped (Prepare refused it).
func claimArcs(c checkpoint.Claim, pool string) []alloc.Arc {
	var out []alloc.Arc
	for _, dev := range c.Devices {
		if dev.Pool != pool {
			continue
		}
		if a, err := arcslice.ParseDeviceName(dev.Device); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// builderFor returns the cached builder unless the inventory changed in
// more than health.
func (p *Publisher) builderFor(inv *device.Inventory) (*arcslice.Builder, error) {
	key := shapeKey(inv)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.builder != nil && key == p.shapeKey {
		return p.builder, nil
	}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{PCIeRoot: p.opts.PCIeRoot, Sizes: p.opts.ArcSizes})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", p.opts.NodeName, err)
	}
	p.builder, p.shapeKey = b, key
	return b, nil
}

// shapeKey is everything of inv the slices depend on except health.
func shapeKey(inv *device.Inventory) string {
	devs := make([]device.Device, len(inv.Devices))
	for i, dev := range inv.Devices {
		dev.Health = device.Health{}
		devs[i] = dev
	}
	return fmt.Sprintf("%v|%v|%s", devs, inv.Rings, inv.DriverVersion)
}

// Publish computes the pool and hands it to sink. A pool that cannot be
// built is not published (the last good one stays), and the error is
// returned.
func (p *Publisher) Publish(ctx context.Context, sink Sink) error {
	res, free, err := p.resources()
	if err != nil {
		return err
	}
	if p.opts.NodeLabels != nil {
		// Before the slices: a raised label lets the scheduler try the
		// node, whose DRA filter then still decides.
		p.opts.NodeLabels.Set(free.Labels())
	}
	if err := sink.PublishResources(ctx, res); err != nil {
		if ctx.Err() != nil {
			return nil // shutting down
		}
		return fmt.Errorf("publish resource slices: %w", err)
	}
	if p.opts.Published != nil {
		p.opts.Published()
	}
	return nil
}

// Run publishes now and again whenever Republish is called (Prepare,
// Unprepare, the device-plugin view), the devices, the cordoned LPUs or
// the checkpoint file (written by another instance during a rolling
// update; polled every Options.FollowInterval) change, or a fault leaves
// the history's window, until ctx ends. A node whose rings cannot be
// published at start is an error (a configuration problem);
// every other failure (the API server away) is logged and retried with
// backoff from 1 s to 30 s, while prepared claims keep being served.
func (p *Publisher) Run(ctx context.Context, sink Sink) error {
	if _, err := p.Resources(); err != nil {
		return err
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := time.Second
	_, changed := p.devices.Snapshot()
	follow := time.NewTicker(cmp.Or(p.opts.FollowInterval, time.Second))
	defer follow.Stop()
	seen := p.claims.Stamp()
	aged := time.NewTimer(0)
	defer aged.Stop()
	aged.Stop()
	var cordonChanged <-chan struct{} // nil without a source: never ready
	if p.opts.Cordoned != nil {
		_, cordonChanged = p.opts.Cordoned.Snapshot()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			_, changed = p.devices.Snapshot()
		case <-cordonChanged:
			var set map[string]bool
			set, cordonChanged = p.opts.Cordoned.Snapshot()
			p.log.Info("cordoned LPUs changed, republishing: their arcs tainted", "lpus", slices.Sorted(maps.Keys(set)),
				"known", p.opts.Cordoned.Known(), "taint", arcslice.CordonTaintKey)
		case <-p.kick:
		case <-retry.C:
		case <-aged.C:
		case <-follow.C:
			// The other pod of a rolling update prepares claims too: its
			// saves show as a new checkpoint file.
			if now := p.claims.Stamp(); now == seen {
				continue
			}
		}
		seen = p.claims.Stamp()
		if err := p.Publish(ctx, sink); err != nil {
			p.log.Error("cannot publish resource slices, retrying", "err", err, "in", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if d, ok := p.expiry(); ok {
			aged.Reset(d)
		} else {
			aged.Stop()
		}
	}
}
