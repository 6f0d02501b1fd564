// Command noopnri is the baseline NRI plugin for the end-to-end create-latency
// benchmark. It subscribes to CreateContainer like lpu-nri does and, by
// default, answers every call with an empty adjustment, so the difference to
// lpu-nri is the cost of lpu-nri's work plus the runtime applying its edits.
//
// With --device/--mount/--env it instead returns one fixed adjustment for
// every container, built per call from pkg/inject's edits model the way
// lpu-nri's nriedit renders one (device nodes, read-only bind mounts, env;
// nriedit is lpu-nri's own, so this copy is local): the difference to
// lpu-nri is then lpu-nri's own decision work alone.
//
//	noopnri --socket /tmp/lpu-e2e.x/nri.sock --idx 10
//	noopnri --socket ... --name fixed --device /dev/lpu2:240:2 --mount /usr/lib/lpu:/usr/lib/lpu --env LPU_VISIBLE_DEVICES=2
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

type plugin struct{ edits *inject.Edits }

// CreateContainer returns no adjustment (or the fixed one) and no updates.
func (p plugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.edits == nil {
		return nil, nil, nil
	}
	return adjustment(*p.edits), nil, nil
}

// adjustment renders e as lpu-nri's nriedit.Adjustment does.
func adjustment(e inject.Edits) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	for _, n := range e.DeviceNodes {
		adj.AddDevice(&api.LinuxDevice{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: api.FileMode(n.FileMode)})
	}
	for _, m := range e.Mounts {
		adj.AddMount(&api.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: inject.MountType, Options: inject.MountOptions()})
	}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		adj.AddEnv(k, v)
	}
	return adj
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run() error {
	var devices, mounts, env list
	socket := flag.String("socket", "/var/run/nri/nri.sock", "runtime NRI socket")
	name := flag.String("name", "noop", "plugin name")
	idx := flag.String("idx", "10", "plugin index (two digits)")
	flag.Var(&devices, "device", "`PATH:MAJOR:MINOR` of a character device to add to every container (repeatable)")
	flag.Var(&mounts, "mount", "`HOST:CONTAINER` read-only bind mount to add to every container (repeatable)")
	flag.Var(&env, "env", "`KEY=VALUE` to set in every container (repeatable)")
	flag.Parse()

	p := plugin{}
	if len(devices)+len(mounts)+len(env) > 0 {
		e, err := fixedEdits(devices, mounts, env)
		if err != nil {
			return err
		}
		p.edits = &e
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := stub.New(p,
		stub.WithSocketPath(*socket), stub.WithPluginName(*name), stub.WithPluginIdx(*idx),
		stub.WithOnClose(stop))
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	slog.Info("connecting", "socket", *socket, "plugin", *idx+"-"+*name, "fixed", p.edits != nil)
	if err := s.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("run NRI stub: %w", err)
	}
	return nil
}

// fixedEdits parses the --device, --mount and --env flags.
func fixedEdits(devices, mounts, env []string) (inject.Edits, error) {
	var e inject.Edits
	for _, d := range devices {
		path, dev, _ := strings.Cut(d, ":")
		major, minor, err := device.ParseDev(dev)
		if err != nil {
			return e, fmt.Errorf("--device %q: want PATH:MAJOR:MINOR: %w", d, err)
		}
		e.DeviceNodes = append(e.DeviceNodes, inject.DeviceNode{
			Path: path, Type: inject.DeviceType, Major: major, Minor: minor, FileMode: inject.DeviceFileMode})
	}
	for _, m := range mounts {
		host, ctr, ok := strings.Cut(m, ":")
		if !ok || host == "" || ctr == "" {
			return e, fmt.Errorf("--mount %q: want HOST:CONTAINER", m)
		}
		e.Mounts = append(e.Mounts, inject.Mount{HostPath: host, ContainerPath: ctr})
	}
	for _, kv := range env {
		if !strings.Contains(kv, "=") {
			return e, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		e.Env = append(e.Env, kv)
	}
	return e, nil
}
