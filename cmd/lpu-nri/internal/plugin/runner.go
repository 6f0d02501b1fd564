package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"

	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/logchange"
)

// Runner keeps a Plugin registered with the runtime's NRI socket: a fresh
// stub per connection, reconnecting with bounded exponential backoff when
// the runtime goes away or is not there yet. It never gives up.
type Runner struct {
	Plugin *Plugin
	Name   string // plugin name, "lpu"
	Index  string // two digits, "10"
	Socket string // the runtime's NRI socket

	Backoff backoff.Steps // reconnect waits; zero fields take backoff.Default
	// Drain is how long the plugin keeps answering the runtime after ctx is
	// done while already telling readiness it is gone (0: DefaultDrain).
	Drain time.Duration
	Log   *slog.Logger // nil discards

	wrapConn func(net.Conn) net.Conn // tests: what the stub reads and writes
}

// DefaultDrain covers the kubelet's step from PreStartContainer (which
// asks readiness) to CreateContainer (which reaches this plugin): a
// container that passed the first while lpu-nri was still connected is
// created before the connection closes, not without its devices. Seen in
// the e2e's helm upgrade: containerd creates the container unadjusted when
// the plugin exits mid-request, required plugin or not.
const DefaultDrain = 2 * time.Second

// Validate checks the name, index and socket.
func (r *Runner) Validate() error {
	if r.Plugin == nil {
		return errors.New("nri runner: no plugin")
	}
	if err := api.CheckPluginName(r.Name); err != nil {
		return fmt.Errorf("nri plugin name: %w", err)
	}
	if err := api.CheckPluginIndex(r.Index); err != nil {
		return fmt.Errorf("nri plugin index: %w", err)
	}
	if r.Socket == "" {
		return errors.New("nri socket: empty path")
	}
	return nil
}

// Run connects and reconnects until ctx is done; it returns nil then, or an
// error only for an invalid configuration.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	log := cmp.Or(r.Log, slog.New(slog.DiscardHandler))
	steps := r.Backoff.OrDefault()
	wait := steps.Min
	var errs logchange.Errors
	for {
		connected, err := r.once(ctx, log)
		r.Plugin.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			log.Warn("lost connection to container runtime, reconnecting", "socket", r.Socket, "err", err)
			wait = steps.Min
			errs.Note(nil)
		} else if errs.Note(closedErr(err)) == logchange.Failed {
			// Log on change only: the loop retries every few seconds.
			log.Warn("cannot connect to container runtime NRI socket, retrying", "socket", r.Socket, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = steps.Next(wait)
	}
}

// errClosed stands for a connection that ended without an error.
var errClosed = errors.New("closed")

func closedErr(err error) error {
	if err == nil {
		return errClosed
	}
	return err
}

// once runs one stub until its connection ends. connected says whether the
// runtime synchronized the plugin on it.
func (r *Runner) once(ctx context.Context, log *slog.Logger) (connected bool, err error) {
	syncsBefore := r.Plugin.syncs.Load()
	closed := make(chan struct{})
	var closeOnce sync.Once
	s, err := stub.New(r.Plugin,
		stub.WithPluginName(r.Name),
		stub.WithPluginIdx(r.Index),
		stub.WithSocketPath(r.Socket),
		stub.WithDialer(func(path string) (net.Conn, error) { return r.Plugin.dial(path, r.wrapConn) }),
		stub.WithLogger(Logger(log)),
		stub.WithOnClose(func() {
			r.Plugin.setConnected(false)
			closeOnce.Do(func() { close(closed) })
		}),
	)
	if err != nil {
		return false, fmt.Errorf("create nri stub: %w", err)
	}
	// The stub outlives ctx by the drain, so it runs on its own context.
	stubCtx, stopStub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStub()
	done := make(chan error, 1)
	go func() { done <- s.Run(stubCtx) }()
	select {
	case err = <-done:
	case <-closed:
		select {
		case err = <-done:
		case <-time.After(2 * time.Second):
			err = errors.New("nri connection closed")
		}
	case <-ctx.Done():
		// Readiness first: new LPU containers are refused at
		// PreStartContainer from now on; the runtime is still answered
		// for containers already past it.
		if r.Plugin.Connected() {
			r.Plugin.setConnected(false)
			drain := r.Drain
			if drain <= 0 {
				drain = DefaultDrain
			}
			log.Info("stopping: readiness off, draining NRI requests", "drain", drain)
			t := time.NewTimer(drain)
			select {
			case <-t.C:
			case <-closed:
				t.Stop()
			}
		}
		stopStub()
		select {
		case err = <-done:
		case <-time.After(2 * time.Second):
			// Start can wait for a Configure that never comes; give up on
			// it, the process is exiting.
		}
	}
	return r.Plugin.syncs.Load() != syncsBefore, err
}

// Logger adapts slog to NRI's logger. NRI's info messages are chatty
// (every registration step), so they go to debug.
func Logger(l *slog.Logger) nrilog.Logger { return nriLogger{l} }

type nriLogger struct{ l *slog.Logger }

func (n nriLogger) Debugf(ctx context.Context, f string, a ...any) {
	n.l.DebugContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}
func (n nriLogger) Infof(ctx context.Context, f string, a ...any) {
	n.l.DebugContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}
func (n nriLogger) Warnf(ctx context.Context, f string, a ...any) {
	n.l.WarnContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}
func (n nriLogger) Errorf(ctx context.Context, f string, a ...any) {
	n.l.ErrorContext(ctx, fmt.Sprintf(f, a...), "component", "nri")
}
