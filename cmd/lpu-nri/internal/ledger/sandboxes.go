package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// Which pods are live. A pod is live while one of its sandboxes runs. NRI
// gives a sandbox no state: the runtime lists stopped sandboxes at
// Synchronize like running ones (containerd keeps those of finished pods
// until the pod is deleted), and PodSandbox.Pid is no proof either way
// (CRI-O reports 0 for a running sandbox without an infra container). So
// the ledger keeps what the runtime told it: a sandbox runs from the
// first container presented in it (Claim) or from being listed, until
// StopPodSandbox or RemovePodSandbox; a listed sandbox runs unless its
// stop was seen, or while it runs a container. The stops seen are kept in
// StoppedName, so a restart of lpu-nri knows them.

// StoppedName is the file, in the state directory, of the sandboxes seen
// stopped and not yet removed.
const StoppedName = "sandboxes.json"

// maxStopped bounds the stops kept: only those of pods holding IDs are
// recorded, and a full set first forgets those of pods that hold none
// any more; past it a stop is not recorded (that pod looks live after a
// restart, as it did before stops were kept).
const maxStopped = MaxEntries

// Sandbox is a pod sandbox as the runtime lists it at Synchronize.
type Sandbox struct {
	ID  string
	Pod string // UID
	// Active: the runtime lists a container of it that has not stopped,
	// which only a running sandbox has.
	Active bool
}

// stop is a sandbox seen stopped.
type stop struct {
	Pod string    `json:"pod"`
	At  time.Time `json:"at"`
}

// stoppedFile is StoppedName's form.
type stoppedFile struct {
	Version int             `json:"version"`
	Stopped map[string]stop `json:"stopped"` // by sandbox ID
}

// Stopped records that sandbox, of pod, stopped (StopPodSandbox): it
// never runs a container again (the kubelet makes a new sandbox), so the
// pod is not live unless another of its sandboxes runs; its IDs may then
// be evicted, and age out Retention from now. The stop is written to
// StoppedName in the background (Close writes what is left), and the next
// Synchronize takes the sandbox as stopped while the runtime lists it.
func (l *Ledger) Stopped(pod, sandbox string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.stopped[sandbox]; !ok && sandbox != "" && len(l.byPod[pod]) > 0 {
		if len(l.stopped) >= maxStopped {
			l.trimStops()
		}
		if len(l.stopped) < maxStopped {
			l.stopped[sandbox] = stop{Pod: pod, At: l.now()}
			l.stopsChanged()
		}
	}
	l.sandboxGone(pod, sandbox)
}

// Removed records that sandbox, of pod, was removed (RemovePodSandbox):
// the runtime lists it no more.
func (l *Ledger) Removed(pod, sandbox string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.stopped[sandbox]; ok {
		delete(l.stopped, sandbox)
		l.stopsChanged()
	}
	l.sandboxGone(pod, sandbox)
}

// markRunning records that sandbox of pod runs.
func (l *Ledger) markRunning(pod, sandbox string) {
	sbs := l.running[pod]
	if sbs == nil {
		sbs = map[string]bool{}
		l.running[pod] = sbs
	}
	sbs[sandbox] = true
}

// isLive reports whether one of pod's sandboxes runs.
func (l *Ledger) isLive(pod string) bool { return len(l.running[pod]) > 0 }

// sandboxGone unmarks sandbox of pod as running; when it was the pod's
// last, the pod's IDs become evictable, seen now.
func (l *Ledger) sandboxGone(pod, sandbox string) {
	sbs := l.running[pod]
	if !sbs[sandbox] {
		return
	}
	delete(sbs, sandbox)
	if len(sbs) > 0 {
		return
	}
	delete(l.running, pod)
	now := l.now()
	for _, id := range l.byPod[pod] {
		e := l.entries[id]
		e.Seen = now
		l.put(id, e)
	}
}

// forgetStops drops the stops of sandboxes not listed (removed while
// lpu-nri was away).
func (l *Ledger) forgetStops(listed map[string]bool) {
	changed := false
	for sb := range l.stopped {
		if !listed[sb] {
			delete(l.stopped, sb)
			changed = true
		}
	}
	if changed {
		l.stopsChanged()
	}
}

// trimStops drops the stops of pods that hold no ID any more.
func (l *Ledger) trimStops() {
	for sb, s := range l.stopped {
		if len(l.byPod[s.Pod]) == 0 {
			delete(l.stopped, sb)
			l.stoppedDirty = true
		}
	}
}

// stopsChanged marks the stops for writing and wakes the flusher.
func (l *Ledger) stopsChanged() {
	l.stoppedDirty = true
	if l.kick != nil {
		select {
		case l.kick <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// loadStopped reads StoppedName, a missing one being empty.
func (l *Ledger) loadStopped() error {
	data, err := readState(l.stoppedPath, maxStopped*256)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var fl stoppedFile
	if err := json.Unmarshal(data, &fl); err != nil {
		return fmt.Errorf("allocation ledger %s: %w (remove it to start over)", l.stoppedPath, err)
	}
	if fl.Version != 1 {
		return fmt.Errorf("allocation ledger %s: version %d, want 1", l.stoppedPath, fl.Version)
	}
	for sb, s := range fl.Stopped {
		if sb == "" || s.Pod == "" {
			return fmt.Errorf("allocation ledger %s: a stopped sandbox without its ID or pod (remove it to start over)", l.stoppedPath)
		}
		l.stopped[sb] = s
	}
	return nil
}

// saveStopped writes the stops through atomicfile when they changed since
// the last write. One write at a time, each of the latest set.
func (l *Ledger) saveStopped() error {
	l.saveMu.Lock()
	defer l.saveMu.Unlock()
	l.mu.Lock()
	if !l.stoppedDirty {
		l.mu.Unlock()
		return nil
	}
	stopped := maps.Clone(l.stopped) // marshalled without mu: Claims go on
	l.stoppedDirty = false
	l.mu.Unlock()
	data, err := json.Marshal(stoppedFile{Version: 1, Stopped: stopped})
	if err == nil {
		err = atomicfile.Write(l.stoppedPath, data, atomicfile.WithMode(0o600), stateOwner())
	}
	if err != nil {
		l.mu.Lock()
		l.stoppedDirty = true
		l.mu.Unlock()
		return fmt.Errorf("allocation ledger: write %s: %w", l.stoppedPath, err)
	}
	return nil
}
