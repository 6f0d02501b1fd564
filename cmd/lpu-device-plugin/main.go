// Command lpu-device-plugin advertises the node's LPUs to the kubelet,
// hands out ring-contiguous sets and reports their health. See --help.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/cli"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/daemon"
	"github.com/hyperaccel/lpu-node/pkg/startup"
)

// version is set at build time: -ldflags "-X main.version=$(deploy/version.sh)".
var version = "dev"

func main() {
	if err := run(); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run() error {
	p := startup.Program{Name: "lpu-device-plugin", Version: version, Usage: cli.Usage}
	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
	if err != nil {
		return p.ParseError(err)
	}
	if opts.Version {
		return p.PrintVersion()
	}
	cfg, log, err := p.Config(opts.ConfigFile, opts.Apply)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return daemon.Run(ctx, daemon.Params{Config: cfg, Options: opts, Logger: log, Version: version})
}
