package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// Memory model, fitted to the RSS summed over the control plane and the
// harness at 100 nodes (≈2.7 GiB, kube-apiserver 2 GiB after the dynamic
// arms' slice rewrites) and 1,000 nodes (≈4.5 GiB; see
// lab/notebooks/cluster.md): a base, what each node adds (its Node
// object, 2 ResourceSlices of 57 arcs, its slice controller) and each live
// pod.
const (
	baseMiB    = 2500
	perNodeMiB = 2.5
	perPodMiB  = 0.1
)

// estimateMiB is the memory a run of nodes Node objects with up to pods
// live pods needs.
func estimateMiB(nodes, pods int) int {
	return int(baseMiB + perNodeMiB*float64(nodes) + perPodMiB*float64(pods))
}

// availableMiB reads MemAvailable from /proc/meminfo.
func availableMiB() (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read /proc/meminfo: %w", err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("parse /proc/meminfo MemAvailable %q: %w", v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("read /proc/meminfo: no MemAvailable line")
}

// checkMemory refuses a run whose estimate exceeds 80 % of what the machine
// has available, before anything starts.
func checkMemory(nodes, pods int) (string, error) {
	need := estimateMiB(nodes, pods)
	have, err := availableMiB()
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("memory estimate %d MiB for %d nodes and up to %d live pods (%d MiB + %.1f MiB/node + %.2f MiB/pod); %d MiB available",
		need, nodes, pods, baseMiB, perNodeMiB, perPodMiB, have)
	if float64(need) > 0.8*float64(have) {
		return msg, fmt.Errorf("-nodes %d: this machine cannot hold it: %s (limit 80 %%)", nodes, msg)
	}
	return msg, nil
}

// state is what a run records so that the next one can clean up after a
// harness that was killed: its own PID, each component's PID and binary,
// the ports in use and the temporary directory.
type state struct {
	Harness int               `json:"harness"`
	Dir     string            `json:"dir"`
	PIDs    map[string]int    `json:"pids"`
	Exes    map[string]string `json:"exes"`
	Ports   []int             `json:"ports"`
}

// stateFile is where the record lives; LPU_CLUSTER_STATE overrides it.
func stateFile() string {
	if p := os.Getenv("LPU_CLUSTER_STATE"); p != "" {
		return p
	}
	return filepath.Join(os.TempDir(), "lpu-cluster-bench.json")
}

func (s *state) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(stateFile(), b, atomicfile.WithMode(0o600))
}

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// cleanupStale reads the last run's record. A run still alive is an error;
// a dead one's components are killed by PID (only when the PID still runs
// the recorded binary, so a reused PID is left alone), its directory is
// removed and its ports are checked. It returns what it did, one line each.
func cleanupStale(logf func(string, ...any)) error {
	b, err := os.ReadFile(stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", stateFile(), err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		logf("cleanup: %s is not a run record (%v); removing it", stateFile(), err)
		return os.Remove(stateFile())
	}
	if s.Harness != os.Getpid() && alive(s.Harness) {
		return fmt.Errorf("another cluster run (pid %d, dir %s) is running; wait for it or stop it by that PID", s.Harness, s.Dir)
	}
	for name, pid := range s.PIDs {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if !alive(pid) || exe != s.Exes[name] {
			continue
		}
		logf("cleanup: killing %s left by run %d (pid %d)", name, s.Harness, pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if s.Dir != "" && strings.HasPrefix(filepath.Base(s.Dir), "lpu-cluster-") {
		if _, err := os.Stat(s.Dir); err == nil {
			logf("cleanup: removing %s left by run %d", s.Dir, s.Harness)
			if err := os.RemoveAll(s.Dir); err != nil {
				return fmt.Errorf("remove %s: %w", s.Dir, err)
			}
		}
	}
	for _, p := range s.Ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			logf("cleanup: port %d of run %d is still in use: %v", p, s.Harness, err)
			continue
		}
		_ = l.Close()
	}
	return os.Remove(stateFile())
}
