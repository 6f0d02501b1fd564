// Command lpu-device-plugin advertises the node's LPUs to the kubelet,
// hands out ring-contiguous sets and reports their health. See --help.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/cli"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/daemon"
	"github.com/hyperaccel/lpu-node/config"
)

// version is set at build time: -ldflags "-X main.version=$(git describe)".
var version = "dev"

func main() {
	if err := run(); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run() error {
	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
	if errors.Is(err, cli.ErrHelp) {
		cli.Usage(os.Stdout)
		return nil
	}
	if err != nil {
		cli.Usage(os.Stderr)
		return err
	}
	if opts.Version {
		fmt.Println("lpu-device-plugin", version)
		return nil
	}
	cfg, err := config.Load(opts.ConfigFile)
	if err != nil {
		return err
	}
	if err := opts.Apply(cfg); err != nil {
		return err
	}
	log, warnings := config.NewLogger(cfg.Log, os.Stderr, os.Getenv)
	slog.SetDefault(log)
	for _, w := range warnings {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return daemon.Run(ctx, daemon.Params{Config: cfg, Options: opts, Logger: log, Version: version})
}
