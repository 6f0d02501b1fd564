// Command lpu-device-plugin advertises the node's LPUs to the kubelet,
// hands out ring-contiguous sets and reports their health. See --help.
package main

import (
	"os"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/daemon"
	"github.com/hyperaccel/lpu-node/internal/startup"
)

// version is set at build time: -ldflags "-X main.version=$(deploy/version.sh)".
var version = "dev"

func main() {
	if err := run(); err != nil {
		startup.LogError(err)
		os.Exit(1)
	}
}

func run() error {
	var opts daemon.Options
	p := startup.Program{Name: "lpu-device-plugin", Version: version, Help: daemon.Usage}
	s, err := p.Start(os.Args[1:], &opts.Flags, daemon.Command(&opts))
	if s == nil {
		return err
	}
	ctx, stop := startup.Context()
	defer stop()
	return daemon.Run(ctx, daemon.Params{Config: s.Config, Options: &opts, Logger: s.Log, Version: version})
}
