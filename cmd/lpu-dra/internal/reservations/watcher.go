package reservations

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/driver"
)

// DefaultResync is how often every prepared claim is re-read when Options
// leave it zero: it catches pods dropped from reservedFor without a pod
// event here, at one GET per prepared claim per period.
const DefaultResync = 5 * time.Minute

// Claims are the driver's prepared claims: *driver.Driver in production.
type Claims interface {
	PreparedClaims() []driver.PreparedClaim
	SyncReservedFor(ctx context.Context, uid types.UID, claim *resourceapi.ResourceClaim) (bool, error)
}

// Options configure Run.
type Options struct {
	Client   kubernetes.Interface
	NodeName string
	Resync   time.Duration // DefaultResync when zero
	// GoneRetry re-reads a deleted pod's claims once more after this long
	// (the resourceclaim controller drops the pod from reservedFor soon
	// after the pod is gone); 5 s when zero.
	GoneRetry time.Duration
	Logger    *slog.Logger
}

// watcher is one Run.
type watcher struct {
	claims Claims
	opts   Options
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

// Run keeps claims' pods current until ctx ends. Apiserver errors are
// logged and retried with backoff (up to 30 s); they never end Run.
func Run(ctx context.Context, claims Claims, opts Options) error {
	if opts.Client == nil || opts.NodeName == "" {
		return fmt.Errorf("reservations: a client and a node name are required")
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.GoneRetry <= 0 {
		opts.GoneRetry = 5 * time.Second
	}
	w := &watcher{claims: claims, opts: opts, log: opts.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "lpu-dra-reservations"})}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	defer w.queue.ShutDown()

	factory := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.SetTransform(trimPod); err != nil {
		return fmt.Errorf("pod informer transform: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.podChanged(nil, obj) },
		UpdateFunc: w.podChanged,
		DeleteFunc: w.podDeleted,
	}); err != nil {
		return fmt.Errorf("pod informer handler: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	go wait.JitterUntilWithContext(ctx, func(context.Context) { w.enqueueAll() }, opts.Resync, 0.1, true)
	go func() { <-ctx.Done(); w.queue.ShutDown() }()
	for w.next(ctx) {
	}
	return nil
}

// next handles one queued claim; false once the queue shut down.
func (w *watcher) next(ctx context.Context) bool {
	nn, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(nn)
	if err := w.sync(ctx, nn); err != nil {
		w.log.Warn("cannot read a prepared claim's reservations; its recorded pods stay served, new ones wait",
			"claim", nn.String(), "retries", w.queue.NumRequeues(nn), "err", err)
		w.queue.AddRateLimited(nn)
		return true
	}
	w.queue.Forget(nn)
	return true
}

// sync reads the claim nn and hands it to every prepared claim of that
// name (one, unless the claim was recreated under the same name).
func (w *watcher) sync(ctx context.Context, nn types.NamespacedName) error {
	var uids []types.UID
	for _, p := range w.claims.PreparedClaims() {
		if p.NamespacedName == nn {
			uids = append(uids, p.UID)
		}
	}
	if len(uids) == 0 {
		return nil // unprepared meanwhile
	}
	claim, err := w.opts.Client.ResourceV1().ResourceClaims(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		claim = nil
	case err != nil:
		return fmt.Errorf("get resourceclaim %s: %w", nn, err)
	}
	for _, uid := range uids {
		if _, err := w.claims.SyncReservedFor(ctx, uid, claim); err != nil {
			return fmt.Errorf("record reservations of claim %s: %w", nn, err)
		}
	}
	return nil
}

// enqueueAll queues every prepared claim: the periodic resync.
func (w *watcher) enqueueAll() {
	for _, p := range w.claims.PreparedClaims() {
		w.queue.Add(p.NamespacedName)
	}
}
