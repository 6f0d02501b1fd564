// Command noopnri is the baseline NRI plugin for the end-to-end create-latency
// benchmark: it subscribes to CreateContainer like lpu-nri does and answers
// every call with an empty adjustment, so the difference between the two runs
// is the cost of lpu-nri's own work, not of the NRI round trip.
//
//	noopnri --socket /tmp/lpu-e2e.x/nri.sock --idx 10
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct{}

// CreateContainer returns no adjustment and no updates.
func (plugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func main() {
	if err := run(); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "/var/run/nri/nri.sock", "runtime NRI socket")
	name := flag.String("name", "noop", "plugin name")
	idx := flag.String("idx", "10", "plugin index (two digits)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := stub.New(plugin{},
		stub.WithSocketPath(*socket), stub.WithPluginName(*name), stub.WithPluginIdx(*idx),
		stub.WithOnClose(stop))
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	slog.Info("connecting", "socket", *socket, "plugin", *idx+"-"+*name)
	if err := s.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("run NRI stub: %w", err)
	}
	return nil
}
