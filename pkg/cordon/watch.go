package cordon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/pkg/nodefollow"
)

// Options configure a Watcher.
type Options struct {
	Client kubernetes.Interface
	Node   string // the Node whose annotation is followed
	// Retry is the first wait after a failed read or watch (doubling to
	// 30 s); 0 means 1 s.
	Retry  time.Duration
	Logger *slog.Logger // nil: slog.Default()
}

// Watcher follows the cordoned LPUs of one Node.
type Watcher struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	good     map[string]bool // the set of the last value that parsed
	set      map[string]bool // what Snapshot gives: good, or good ∪ a bad value's good entries
	value    string          // the annotation value set was read from
	seenRV   string          // the resourceVersion of the Node value came from
	changed  chan struct{}   // closed at the next change of set or of known
	known    bool            // the Node was read once, or the Watcher is disabled
	disabled error
}

// NewWatcher returns a Watcher of no cordoned LPU; Run follows the Node.
func NewWatcher(opts Options) *Watcher {
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Watcher{opts: opts, log: log.With("node", opts.Node), changed: make(chan struct{})}
}

// Snapshot returns the cordoned LPUs (read-only, empty when none) and a
// channel closed when they or Known change.
func (w *Watcher) Snapshot() (map[string]bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.set, w.changed
}

// Known says whether the set is the Node's: true once the Node was read,
// or once the Watcher gave up on it (Disabled), when the set stays empty.
// Until then a caller fails closed (lpu-dra publishes every LPU as
// cordoned for that moment, the device plugin reports every LPU
// Unhealthy); the change channel is closed when it turns true.
func (w *Watcher) Known() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.known
}

// Disabled is why the Watcher stopped following the Node (the API server
// refused it: no RBAC to get or watch Nodes), nil while it follows.
func (w *Watcher) Disabled() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.disabled
}

// Run reads and watches the Node until ctx ends. Refused by RBAC, it logs
// that once and returns nil, the set staying what it was (empty unless a
// read succeeded before). Other failures (the API server away) are retried
// with backoff, the set unchanged meanwhile.
func (w *Watcher) Run(ctx context.Context) error {
	err := nodefollow.Retry(ctx, w.opts.Retry, w.log, "cannot follow the node's cordoned LPUs, retrying", w.follow)
	if err != nil {
		w.mu.Lock()
		w.disabled = err
		w.markKnown()
		w.mu.Unlock()
		w.log.Warn("cannot follow the node's cordoned LPUs, running without them", "err", err)
	}
	return nil
}

// follow reads the Node, then watches it until the watch ends (nil) or
// fails.
func (w *Watcher) follow(ctx context.Context) error {
	wt, err := nodefollow.Open(ctx, w.opts.Client.CoreV1().Nodes(), w.opts.Node, w.observe)
	if err != nil {
		return err
	}
	defer wt.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-wt.ResultChan():
			if !ok {
				return nil // the API server ends watches now and then
			}
			switch ev.Type {
			case watch.Error:
				return fmt.Errorf("watch node %s: %w", w.opts.Node, apierrors.FromObject(ev.Object))
			case watch.Added, watch.Modified:
				if n, ok := ev.Object.(*corev1.Node); ok {
					w.observe(n)
				}
			}
		}
	}
}

// observe takes the annotation of n, unless n is older than the Node last
// seen (a re-read after a failed watch can race a late event). A value
// that does not parse keeps the last good set and adds its own well-formed
// entries: fail closed, never uncordon on a typo.
func (w *Watcher) observe(n *corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, err := resourceversion.CompareResourceVersion(n.ResourceVersion, w.seenRV); err == nil && c < 0 {
		return
	}
	w.seenRV = n.ResourceVersion
	value := n.Annotations[Annotation]
	if value == w.value {
		w.markKnown()
		return
	}
	ids, err := Parse(value)
	next := toSet(ids)
	if err != nil {
		w.log.Error("malformed cordoned-LPU annotation: keeping the LPUs cordoned before and adding its valid entries",
			"annotation", Annotation, "value", clip(value), "err", err)
		for id := range w.good {
			next[id] = true
		}
	} else {
		w.good = next
	}
	w.value = value
	if maps.Equal(next, w.set) {
		w.markKnown()
		return
	}
	// The set, not the value: after a malformed value it is more.
	lpus, _ := Format(slices.Collect(maps.Keys(next))) // IDs from Parse: well formed
	w.log.Info("cordoned LPUs changed", "lpus", lpus)
	w.set, w.known = next, true
	close(w.changed)
	w.changed = make(chan struct{})
}

// markKnown makes Known true, telling Snapshot's callers once; w.mu held.
func (w *Watcher) markKnown() {
	if w.known {
		return
	}
	w.known = true
	close(w.changed)
	w.changed = make(chan struct{})
}

// toSet returns ids as a set, never nil.
func toSet(ids []string) map[string]bool {
	s := make(map[string]bool, len(ids))
	for _, id := range ids {
		s[id] = true
	}
	return s
}
