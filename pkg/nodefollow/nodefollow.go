// Package nodefollow follows a daemon's own Node object: read it, watch it
// from that read, and start again after a failure with backoff, until the
// API server refuses (no RBAC) or the context ends. pkg/nodelabel (which
// also writes the Node) and pkg/cordon (which only reads it) build on it.
package nodefollow

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// MaxBackoff caps the wait between two attempts.
const MaxBackoff = 30 * time.Second

// Retry calls follow until ctx ends. A failure is logged (msg, with "err"
// and "in") and retried after retry, doubling up to MaxBackoff, reset
// after an attempt that ended without error (a watch the API server
// closed). A Forbidden or Unauthorized error ends it: Retry returns that
// error, and the caller runs without the Node. It returns nil when ctx
// ends.
func Retry(ctx context.Context, retry time.Duration, log *slog.Logger, msg string, follow func(context.Context) error) error {
	backoff := retry
	for ctx.Err() == nil {
		err := follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return err
		}
		if err == nil {
			backoff = retry
			continue
		}
		log.Error(msg, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, MaxBackoff)
	}
	return nil
}

// Open reads the Node name, hands it to observe, and starts a watch of it
// from that read; the caller stops the watch. A read that succeeds is
// observed even when the watch then fails (RBAC may allow get, not watch).
func Open(ctx context.Context, nodes typedcorev1.NodeInterface, name string, observe func(*corev1.Node)) (watch.Interface, error) {
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	observe(n)
	w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: n.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watch node %s: %w", name, err)
	}
	return w, nil
}
