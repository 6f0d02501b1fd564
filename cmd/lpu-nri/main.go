// Command lpu-nri injects the LPUs lpu-device-plugin allocated into
// containers, as an NRI plugin (default), or keeps a CDI spec current for
// runtimes without NRI. See --help.
package main

import (
	"errors"
	"os"
	"strings"

	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/daemon"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/guard"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/plugin"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/workloadcheck"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// version is set at build time: -ldflags "-X main.version=$(deploy/version.sh)".
var version = "dev"

// errChecksFailed makes doctor exit non-zero after printing its report.
var errChecksFailed = errors.New("doctor: some checks failed")

func main() {
	// the runtime guard's hook runs on every LPU container start: no config
	// file, no logger, only its own flag
	if len(os.Args) > 1 && os.Args[1] == guard.Command {
		os.Exit(guard.Main(os.Args[2:], os.Stdin, os.Stderr))
	}
	// the check runs inside a workload container: no config, no node
	if len(os.Args) > 1 && os.Args[1] == workloadcheck.Command {
		os.Exit(workloadcheck.Main(os.Args[2:], os.Getenv, os.Stdout))
	}
	if err := run(); err != nil {
		if !errors.Is(err, errChecksFailed) {
			startup.LogError(err)
		}
		os.Exit(1)
	}
}

func run() error {
	var opts daemon.Options
	cmds := daemon.NewCommands(&opts)
	prog := startup.Program{Name: "lpu-nri", Version: version, Help: daemon.Usage}
	s, err := prog.Start(os.Args[1:], &opts.Flags, cmds.All()...)
	if s == nil {
		return err
	}
	nrilog.Set(plugin.Logger(s.Log)) // NRI's own messages through slog, info demoted to debug
	ctx, stop := startup.Context()
	defer stop()
	mode, why := daemon.ResolveMode(s.Config)
	p := daemon.Params{Config: s.Config, Mode: mode, ModeReason: why, Logger: s.Log, Version: version}
	if opts.OtherFingerprints != "" {
		p.OtherFingerprints = strings.Split(opts.OtherFingerprints, ",")
	}
	switch s.Command {
	case cmds.Simulate:
		return devicesim.WriteNodeTo(os.Stdout, s.Config.Root, opts.LPUs, s.Config.Simulate.Backend)
	case cmds.CDIGenerate:
		return daemon.CDIGenerate(ctx, p, os.Stdout)
	case cmds.CDIList:
		return daemon.CDIList(ctx, p, os.Stdout)
	case cmds.Doctor:
		failed, err := daemon.Doctor(ctx, p, opts.PluginDir, os.Stdout)
		if err == nil && failed {
			err = errChecksFailed
		}
		return err
	}
	return daemon.Run(ctx, p)
}
