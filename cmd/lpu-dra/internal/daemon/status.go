package daemon

import (
	"context"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/statuswriter"
)

// startStatus starts the claim status writer the kubelet plugin reports
// through.
func startStatus(ctx context.Context, g *errgroup.Group, k *kubelet, log *slog.Logger) {
	k.status = statuswriter.New(k.client, statuswriter.Options{Logger: log})
	g.Go(func() error { k.status.Run(ctx); return nil })
}
