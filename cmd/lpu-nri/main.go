// Command lpu-nri injects the LPUs lpu-device-plugin allocated into
// containers, as an NRI plugin (default), or keeps a CDI spec current for
// runtimes without NRI. See --help.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/cli"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/daemon"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/plugin"
	"github.com/hyperaccel/lpu-node/pkg/startup"
)

// version is set at build time: -ldflags "-X main.version=$(git describe)".
var version = "dev"

// errChecksFailed makes doctor exit non-zero after printing its report.
var errChecksFailed = errors.New("doctor: some checks failed")

func main() {
	if err := run(); err != nil {
		if !errors.Is(err, errChecksFailed) {
			slog.Error("exiting", "err", err)
		}
		os.Exit(1)
	}
}

func run() error {
	prog := startup.Program{Name: "lpu-nri", Version: version, Usage: cli.Usage}
	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
	if err != nil {
		return prog.ParseError(err)
	}
	if opts.Version {
		return prog.PrintVersion()
	}
	cfg, log, err := prog.Config(opts.ConfigFile, opts.Apply)
	if err != nil {
		return err
	}
	nrilog.Set(plugin.Logger(log)) // NRI's own messages through slog, info demoted to debug
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	mode, why := cli.ResolveMode(cfg)
	p := daemon.Params{Config: cfg, Mode: mode, ModeReason: why, Simulate: opts.Simulate, Logger: log, Version: version}
	if opts.OtherFingerprints != "" {
		p.OtherFingerprints = strings.Split(opts.OtherFingerprints, ",")
	}
	switch opts.Command {
	case cli.CmdCDIGenerate:
		return daemon.CDIGenerate(ctx, p, os.Stdout)
	case cli.CmdCDIList:
		return daemon.CDIList(ctx, p, os.Stdout)
	case cli.CmdDoctor:
		failed, err := daemon.Doctor(ctx, p, opts.PluginDir, os.Stdout)
		if err == nil && failed {
			err = errChecksFailed
		}
		return err
	}
	return daemon.Run(ctx, p)
}
