package nodefollow

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Failures are retried, a refusal by RBAC ends Retry with that error, and
// a cancelled context ends it with nil.
func TestRetry(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no"))
	calls := 0
	err := Retry(context.Background(), time.Millisecond, log, "retrying", func(context.Context) error {
		calls++
		switch calls {
		case 1, 2:
			return errors.New("api server away")
		case 3:
			return nil // a watch the server closed: follow again at once
		}
		return forbidden
	})
	if !apierrors.IsForbidden(err) || calls != 4 {
		t.Fatalf("Retry = %v after %d calls, want the Forbidden error after 4", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = Retry(ctx, time.Millisecond, log, "retrying", func(context.Context) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errors.New("api server away")
	})
	if err != nil || calls != 3 {
		t.Fatalf("Retry = %v after %d calls, want nil once the context ended at the third", err, calls)
	}
}
