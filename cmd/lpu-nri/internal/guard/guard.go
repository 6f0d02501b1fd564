package guard

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// SpecFileName is the guard spec's file name in the CDI spec directory.
const SpecFileName = "hyperaccel.ai-lpu-guard.json"

// Command is the hook's subcommand: lpu-nri guard --state-dir DIR.
const Command = "guard"

// HookTimeout is the timeout, in seconds, the spec gives the hook (runc
// kills it after that and fails the container). The hook needs
// milliseconds; the margin covers a loaded node.
const HookTimeout = 10

// binName is the installed copy's path under the state directory.
var binName = filepath.Join("bin", "lpu-nri")

// Spec returns the guard's CDI spec: one device, inject.GuardDeviceName,
// whose createRuntime hook runs hookPath guard --state-dir stateDir.
func Spec(hookPath, stateDir string) (*specs.Spec, error) {
	if !filepath.IsAbs(hookPath) || !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("guard spec: hook %q and state dir %q must be absolute paths", hookPath, stateDir)
	}
	timeout := HookTimeout
	s := &specs.Spec{
		Kind: inject.GuardKind,
		Devices: []specs.Device{{
			Name: inject.GuardDeviceName,
			ContainerEdits: specs.ContainerEdits{Hooks: []*specs.Hook{{
				HookName: cdi.CreateRuntimeHook,
				Path:     hookPath,
				Args:     []string{"lpu-nri", Command, "--state-dir", stateDir},
				Timeout:  &timeout,
			}}},
		}},
	}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("guard spec version: %w", err)
	}
	s.Version = v
	return s, nil
}

// WriteSpec writes the guard spec for hookPath and stateDir as
// cdiDir/SpecFileName, validated by the CDI library; an unchanged spec is
// not rewritten. The spec is never removed: the kubelet replays
// checkpointed allocations that name the guard device.
func WriteSpec(cdiDir, hookPath, stateDir string) (changed bool, err error) {
	s, err := Spec(hookPath, stateDir)
	if err != nil {
		return false, err
	}
	return inject.WriteNamedSpec(cdiDir, SpecFileName, s)
}

// Install copies the running executable to <stateDir>/bin/lpu-nri (mode
// 0755), where the host finds it at the same path as the daemon (the
// chart mounts the state directory at its host path), and returns that
// path. An identical copy is left alone; a different one is replaced
// atomically, so a hook running at that moment runs the old or the new
// binary, never half of one.
func Install(stateDir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("guard: find own executable: %w", err)
	}
	return InstallFrom(exe, stateDir)
}

// InstallFrom is Install for the executable at exe. The state directory,
// its bin/ and the copy get the seal key's owner and mode checks
// (internal/statedir) before the path is returned, the copy also when it
// was there already: runc runs the hook as root, so whoever could write
// any of them would run code as root on the node. A failed check is an
// error naming the path, and the caller names the hook in no spec.
func InstallFrom(exe, stateDir string) (string, error) {
	dir, err := statedir.Check(stateDir)
	if err != nil {
		return "", fmt.Errorf("guard: %w", err)
	}
	dst := filepath.Join(dir, binName)
	if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("guard: create %s: %w", filepath.Dir(dst), err)
	}
	if st, err := os.Lstat(filepath.Dir(dst)); err != nil || !st.IsDir() {
		return "", fmt.Errorf("guard: %s is not a directory (%v)", filepath.Dir(dst), err)
	}
	if _, err := statedir.Check(filepath.Dir(dst)); err != nil {
		return "", fmt.Errorf("guard: hook %w", err)
	}
	same, err := sameContent(exe, dst)
	if err != nil {
		return "", err
	}
	if !same {
		if err := copyFile(exe, dst); err != nil {
			return "", err
		}
	}
	if err := checkHook(dst); err != nil {
		return "", err
	}
	return dst, nil
}

// checkHook refuses the installed hook unless it is a regular file (not a
// link) owned by the effective uid, with one link and no group or other
// write bit.
func checkHook(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("guard: hook %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("guard: hook %s: mode %v is not a regular file", path, st.Mode())
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("guard: hook %s: mode %#o lets group/others write, want 0755", path, perm)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := os.Geteuid(); int(sys.Uid) != uid {
			return fmt.Errorf("guard: hook %s: owned by uid %d, want %d (the daemon's uid)", path, sys.Uid, uid)
		}
		if sys.Nlink != 1 {
			return fmt.Errorf("guard: hook %s: %d links, want 1: another name could change it", path, sys.Nlink)
		}
	}
	return nil
}

// copyFile streams src into dst atomically and durably (the binary is
// tens of MB; the daemon's memory limit is 128 MiB).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("guard: open %s: %w", src, err)
	}
	defer in.Close()
	if err := atomicfile.WriteFrom(dst, in, atomicfile.WithMode(0o755)); err != nil {
		return fmt.Errorf("guard: install %s: %w", src, err)
	}
	return nil
}

// sameContent reports whether b exists with a's bytes and mode 0755.
func sameContent(a, b string) (bool, error) {
	st, err := os.Stat(b)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("guard: stat %s: %w", b, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
		return false, nil
	}
	ha, err := hashFile(a)
	if err != nil {
		return false, err
	}
	hb, err := hashFile(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ha, hb), nil
}

func hashFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("guard: open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("guard: read %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// maxState bounds the state runc writes on the hook's stdin, and
// maxConfig the bundle's config.json read when the state has no
// annotations.
const (
	maxState  = 1 << 20
	maxConfig = 16 << 20
)

// state is the part of the OCI state (runtime-spec "state") the hook
// reads.
type state struct {
	ID          string            `json:"id"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
}

// Check is the hook: it reads the OCI state from r and returns nil only
// when the container's annotations carry lpu-nri's proof for its ID under
// the seal key in stateDir. Annotations come from the state (runc and
// crun copy the spec's there), else from the bundle's config.json.
func Check(r io.Reader, stateDir string) error {
	data, err := io.ReadAll(io.LimitReader(r, maxState+1))
	if err != nil {
		return fmt.Errorf("read container state: %w", err)
	}
	if len(data) > maxState {
		return fmt.Errorf("container state larger than %d bytes", maxState)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("decode container state: %w", err)
	}
	ann := st.Annotations
	if _, ok := ann[inject.AnnotationVerified]; !ok && st.Bundle != "" {
		if ann, err = bundleAnnotations(st.Bundle); err != nil {
			return err
		}
	}
	key, err := inject.LoadKey(stateDir)
	if err != nil {
		return err
	}
	return key.CheckVerified(st.ID, ann)
}

// bundleAnnotations reads the annotations of bundle/config.json.
func bundleAnnotations(bundle string) (map[string]string, error) {
	path := filepath.Join(bundle, "config.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxConfig {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxConfig)
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return spec.Annotations, nil
}
