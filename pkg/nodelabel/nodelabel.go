// Package nodelabel keeps a few numeric labels on a daemon's own Node:
// lpu-dra's scheduling hints (pkg/arcslice's largest-free-arc and
// free-lpus). A value that rises is written at once, so a node that can
// fit a pod again qualifies for it at once; one that falls is written only
// after it stayed lower for Options.LowerAfter, so a busy node is not
// rewritten on every Prepare (each Node write wakes every scheduler's
// informers) and a stale high value costs the scheduler a filter call,
// never a wrong grant. A label edited or deleted by hand is put back.
package nodelabel

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/pkg/nodefollow"
)

// DefaultLowerAfter is how long a lower value waits when
// Options.LowerAfter is 0.
const DefaultLowerAfter = 5 * time.Second

// Options configure a Keeper.
type Options struct {
	Client kubernetes.Interface
	Node   string // the Node whose labels are kept
	// LowerAfter is how long a value must stay lower than the Node's
	// before it is written; 0 means DefaultLowerAfter.
	LowerAfter time.Duration
	// Retry is the first wait after a failed read or write (doubling to
	// 30 s); 0 means 1 s.
	Retry  time.Duration
	Logger *slog.Logger // nil: slog.Default()
}

// Keeper writes the labels last given to Set onto the Node.
type Keeper struct {
	opts Options
	log  *slog.Logger
	kick chan struct{}

	mu       sync.Mutex
	want     map[string]string
	seen     map[string]string    // the Node's labels as last read
	seenRV   string               // the resourceVersion seen was read at
	lowSince map[string]time.Time // when want first fell below seen
	disabled error                // why labels are not kept (RBAC), nil while they are
	writes   int
}

// New returns a Keeper; Run does the writing.
func New(opts Options) *Keeper {
	if opts.LowerAfter <= 0 {
		opts.LowerAfter = DefaultLowerAfter
	}
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Keeper{opts: opts, log: log.With("node", opts.Node), kick: make(chan struct{}, 1),
		lowSince: map[string]time.Time{}}
}

// Set makes labels the values to keep (keys not given are left alone);
// it never blocks. Values are compared as integers.
func (k *Keeper) Set(labels map[string]string) {
	k.mu.Lock()
	if k.want == nil {
		k.want = map[string]string{}
	}
	maps.Copy(k.want, labels)
	k.mu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Disabled is why the Keeper stopped writing (the API server refused it:
// no RBAC to read, watch or patch the Node), nil while it writes.
func (k *Keeper) Disabled() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.disabled
}

// Writes is how many patches the Node got from this Keeper.
func (k *Keeper) Writes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.writes
}

// Run reads and watches the Node and writes what Set asked for until ctx
// ends. Refused by RBAC, it logs that once and returns nil: the daemon
// runs on without labels. Other failures (the API server away) are
// retried with backoff.
func (k *Keeper) Run(ctx context.Context) error {
	err := nodefollow.Retry(ctx, k.opts.Retry, k.log, "cannot keep the node's labels, retrying", k.follow)
	if err != nil {
		k.mu.Lock()
		k.disabled = err
		k.mu.Unlock()
		k.log.Warn("cannot keep the node's labels, running without them (the scheduler's node-label prefilter does not apply to this node)", "err", err)
	}
	return nil
}

// follow reads the Node, then watches it, writing after every change of
// the Node or of Set's values, until the watch ends (nil) or fails.
func (k *Keeper) follow(ctx context.Context) error {
	nodes := k.opts.Client.CoreV1().Nodes()
	w, err := nodefollow.Open(ctx, nodes, k.opts.Node, k.observe)
	if err != nil {
		return err
	}
	defer w.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil // the API server ends watches now and then
			}
			switch ev.Type {
			case watch.Error:
				return fmt.Errorf("watch node %s: %w", k.opts.Node, apierrors.FromObject(ev.Object))
			case watch.Added, watch.Modified:
				if n, ok := ev.Object.(*corev1.Node); ok {
					k.observe(n)
				}
			}
		case <-k.kick:
		case <-timer.C:
		}
		wait, err := k.write(ctx)
		if err != nil {
			return err
		}
		timer.Reset(wait)
	}
}

// observe records the Node's labels, unless n is older than what was
// recorded: a patch's answer can be newer than the watch event that
// arrives after it, and taking the stale labels for a hand edit would
// write them again.
func (k *Keeper) observe(n *corev1.Node) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, err := resourceversion.CompareResourceVersion(n.ResourceVersion, k.seenRV); err == nil && c < 0 {
		return
	}
	k.seen, k.seenRV = maps.Clone(n.Labels), n.ResourceVersion
}

// write patches the labels due now and returns how long until the next
// lower value is due (an hour when none waits).
func (k *Keeper) write(ctx context.Context) (time.Duration, error) {
	patch, wait := k.due(time.Now())
	if len(patch) == 0 {
		return wait, nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return 0, fmt.Errorf("encode label patch: %w", err)
	}
	n, err := k.opts.Client.CoreV1().Nodes().Patch(ctx, k.opts.Node, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return 0, fmt.Errorf("label node %s with %v: %w", k.opts.Node, patch, err)
	}
	k.observe(n)
	k.mu.Lock()
	k.writes++
	k.mu.Unlock()
	k.log.Debug("labelled the node", "labels", patch)
	return wait, nil
}

// due returns the labels to write at now: every wanted value that is
// missing, higher than the Node's or not a number there, and every lower
// one that has waited LowerAfter; and the wait until the next lower one.
func (k *Keeper) due(now time.Time) (map[string]string, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	patch := map[string]string{}
	wait := time.Hour
	for key, want := range k.want {
		have, ok := k.seen[key]
		if ok && have == want {
			delete(k.lowSince, key)
			continue
		}
		hv, herr := strconv.Atoi(have)
		wv, werr := strconv.Atoi(want)
		if !ok || herr != nil || werr != nil || wv > hv {
			patch[key] = want
			delete(k.lowSince, key)
			continue
		}
		since, waiting := k.lowSince[key]
		if !waiting {
			since = now
			k.lowSince[key] = now
		}
		if left := k.opts.LowerAfter - now.Sub(since); left > 0 {
			wait = min(wait, left)
			continue
		}
		patch[key] = want
		delete(k.lowSince, key)
	}
	return patch, wait
}
