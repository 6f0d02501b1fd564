// Command lpu-dra is the kubelet DRA driver for LPUs: it publishes every
// ring arc as a device and prepares claims as per-claim CDI specs. See
// --help.
package main

import (
	"log/slog"
	"os"

	"k8s.io/klog/v2"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/daemon"
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
	p := startup.Program{Name: "lpu-dra", Version: version, Help: daemon.Usage}
	s, err := p.Start(os.Args[1:], &opts.Flags, daemon.Command(&opts))
	if s == nil {
		return err
	}
	routeKlog(s.Log)
	ctx, stop := startup.Context()
	defer stop()
	return daemon.Run(ctx, daemon.Params{Config: s.Config, Options: &opts, Logger: s.Log, Version: version})
}

// routeKlog sends what client-go and the DRA kubelet plugin library log
// through klog to log, so lpu-dra writes one format (JSON by default), not
// klog's text lines beside it. Once, before any goroutine logs: klog's
// logger is process-wide and not safe to swap while in use.
func routeKlog(log *slog.Logger) {
	klog.SetSlogLogger(log)
}
