package cdimode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/logchange"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// maxSpecSize bounds the spec files read when looking for stale ones.
const maxSpecSize = 1 << 20

// errNotSynced is /readyz's answer until a Sync leaves a current spec.
var errNotSynced = errors.New("no current CDI spec on disk yet")

// Render discovers the node and renders its CDI spec.
func Render(ctx context.Context, disc device.Discoverer, opts inject.Options) (*specs.Spec, error) {
	inv, err := disc.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("discover lpus: %w", err)
	}
	spec, err := inject.Spec(inv, opts)
	if err != nil {
		return nil, fmt.Errorf("render cdi spec: %w", err)
	}
	return spec, nil
}

// Names returns the fully qualified device names of a spec, in spec order:
// "hyperaccel.ai/lpu=lpu0", ..., "hyperaccel.ai/lpu=all".
func Names(spec *specs.Spec) []string {
	out := make([]string, 0, len(spec.Devices))
	for _, d := range spec.Devices {
		out = append(out, spec.Kind+"="+d.Name)
	}
	return out
}

// Syncer writes and keeps current the spec in Dir.
type Syncer struct {
	Discoverer device.Discoverer
	Dir        string           // the CDI spec directory, /var/run/cdi
	Options    inject.Options   // driver mounts and extra env
	Interval   time.Duration    // rescan period; default config.DefaultResyncInterval
	Metrics    *metrics.Metrics // optional
	Log        *slog.Logger     // nil discards

	synced atomic.Bool
}

func (s *Syncer) log() *slog.Logger { return cmp.Or(s.Log, slog.New(slog.DiscardHandler)) }

// Ready is the readiness check of CDI mode: nil while the last Sync left a
// current spec on disk.
func (s *Syncer) Ready() error {
	if !s.synced.Load() {
		return errNotSynced
	}
	return nil
}

// Sync discovers once and brings Dir in line: it writes the spec when it
// differs from the file (changed=true), removes it when the node has no
// LPUs (or no driver), and removes stale specs of our kind under other
// names. On other discovery errors the existing file stays.
func (s *Syncer) Sync(ctx context.Context) (changed bool, err error) {
	if s.Dir == "" {
		return false, errors.New("cdi spec dir: empty path")
	}
	spec, err := Render(ctx, s.Discoverer, s.Options)
	switch {
	case errors.Is(err, inject.ErrNoDevices) || errors.Is(err, device.ErrNoDriver):
		s.synced.Store(false)
		path := filepath.Join(s.Dir, inject.SpecFileName)
		_, statErr := os.Stat(path)
		if rmErr := inject.RemoveSpec(s.Dir); rmErr != nil {
			return false, rmErr
		}
		if statErr == nil {
			s.log().Info("removed cdi spec: no LPUs on this node", "path", path, "err", err)
			changed = true
		}
		return changed, err
	case err != nil:
		s.synced.Store(false)
		return false, err
	}
	changed, err = inject.WriteSpec(s.Dir, spec)
	if err != nil {
		s.synced.Store(false)
		return false, err
	}
	s.synced.Store(true)
	if changed {
		if s.Metrics != nil {
			s.Metrics.SpecWrites.Inc()
		}
		s.log().Info("wrote cdi spec", "path", filepath.Join(s.Dir, inject.SpecFileName),
			"cdiVersion", spec.Version, "devices", Names(spec))
	}
	removed, err := s.removeStale()
	for _, p := range removed {
		s.log().Info("removed stale cdi spec of our kind", "path", p, "kind", inject.CDIKind)
	}
	return changed || len(removed) > 0, err
}

// removeStale removes spec files in Dir, other than ours, whose kind is
// ours: an older file name, or a copy left by a previous version.
func (s *Syncer) removeStale() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("read cdi spec dir %s: %w", s.Dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if name == inject.SpecFileName || !e.Type().IsRegular() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(s.Dir, name)
		if kind, err := specKind(path); err != nil || kind != inject.CDIKind {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove stale cdi spec %s: %w", path, err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// specKind reads the kind field of a JSON or YAML spec file.
func specKind(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Size() > maxSpecSize {
		return "", fmt.Errorf("%s: %d bytes, too large for a cdi spec", path, fi.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return strings.TrimSpace(head.Kind), nil
}

// Run syncs now and then every Interval until ctx is done. The spec stays
// on disk when Run returns: it describes the hardware, not a grant, and
// containers created while lpu-nri restarts still need it. Errors are
// logged (on change) and retried; Run returns nil on cancellation.
func (s *Syncer) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = config.DefaultResyncInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var errs logchange.Errors
	for {
		_, err := s.Sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if s.Metrics != nil {
			s.Metrics.Rescans.Inc()
		}
		switch errs.Note(err) {
		case logchange.Failed:
			s.log().Warn("cdi spec sync failed, retrying", "dir", s.Dir, "err", err)
		case logchange.Recovered:
			s.log().Info("cdi spec sync recovered", "dir", s.Dir)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
