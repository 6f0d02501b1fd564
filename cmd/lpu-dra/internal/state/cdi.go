package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// SpecFile is the file name of a claim's CDI spec in the CDI dir.
func SpecFile(uid string) string {
	return cdi.GenerateTransientSpecName(inject.Driver, inject.ClaimClass, uid) + ".json"
}

// specPrefix starts every claim spec's file name.
var specPrefix = cdi.GenerateSpecName(inject.Driver, inject.ClaimClass) + "_"

// Heal makes the CDI dir match the checkpoint: it rewrites the spec of
// every prepared claim whose file is missing (the kubelet may recreate a
// container from it at any time) and removes claim specs of claims the
// checkpoint does not hold (a crash between spec write and checkpoint
// save). A claim naming LPUs discovery no longer knows stays prepared,
// logged, so that its Unprepare still works.
//
// It runs under the checkpoint lock on the checkpoint as it is on disk: a
// claim another driver instance (the other pod of a rolling update) has
// half prepared holds the lock, so its spec is never taken for an orphan.
func (s *State) Heal() {
	err := s.Update(context.Background(), "heal", func(cur *checkpoint.State) (bool, error) {
		snap, _ := s.devices.Snapshot()
		s.restoreSpecs(cur, snap)
		s.removeOrphans(cur)
		return false, nil
	})
	if err != nil {
		s.log.Error("cannot heal the cdi dir against the checkpoint", "err", err)
	}
}

// restoreSpecs rewrites the missing spec of every claim in cur.
func (s *State) restoreSpecs(cur *checkpoint.State, snap health.Snapshot) {
	for uid, c := range cur.Claims {
		path := filepath.Join(s.opts.CDIDir, c.SpecName)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if snap.Inventory == nil {
			s.log.Error("no device inventory yet; the CDI spec of a prepared claim cannot be restored", "claim", c.Namespace+"/"+c.Name, "uid", uid)
			continue
		}
		devs, err := lookup(snap.Inventory, c.LPUs)
		if err != nil {
			s.log.Error("prepared claim names LPUs discovery does not know; its CDI spec cannot be restored",
				"claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		if err := s.writeSpec(uid, devs, snap.Inventory.DriverVersion); err != nil {
			s.log.Error("cannot restore the CDI spec of a prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		s.log.Info("restored the CDI spec of a prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", uid, "file", path)
	}
}

// removeOrphans removes the claim specs of claims cur does not hold.
func (s *State) removeOrphans(cur *checkpoint.State) {
	entries, err := os.ReadDir(s.opts.CDIDir)
	if err != nil {
		s.log.Warn("cannot list the cdi dir", "dir", s.opts.CDIDir, "err", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		uid, ok := strings.CutPrefix(strings.TrimSuffix(name, ".json"), specPrefix)
		if !ok || !strings.HasSuffix(name, ".json") {
			continue
		}
		if _, held := cur.Claims[uid]; held {
			continue
		}
		if err := os.Remove(filepath.Join(s.opts.CDIDir, name)); err != nil {
			s.log.Warn("cannot remove an orphaned claim CDI spec", "file", name, "err", err)
			continue
		}
		s.log.Info("removed an orphaned claim CDI spec", "file", name)
	}
}

// lookup returns the devices of ids in that order.
func lookup(inv *device.Inventory, ids []string) ([]device.Device, error) {
	out := make([]device.Device, 0, len(ids))
	for _, id := range ids {
		dev, ok := inv.Device(id)
		if !ok {
			return nil, fmt.Errorf("LPU %s is unknown to discovery", id)
		}
		out = append(out, dev)
	}
	return out, nil
}

// writeSpec renders the claim's CDI spec and writes it durably, validated
// by the CDI library (inject.WriteSpecFile).
func (s *State) writeSpec(uid string, devs []device.Device, driverVersion string) error {
	spec, err := inject.ClaimSpec(uid, inject.ForDevices(devs, driverVersion, s.opts.Inject))
	if err != nil {
		return err
	}
	return inject.WriteSpecFile(filepath.Join(s.opts.CDIDir, SpecFile(uid)), spec)
}
