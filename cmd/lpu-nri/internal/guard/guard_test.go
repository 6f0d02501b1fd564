package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestSpecResolves: the spec WriteSpec installs is read by the CDI library
// as a runtime reads it, and the guard device injects exactly one
// createRuntime hook running lpu-nri guard with the state dir.
func TestSpecResolves(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	changed, err := WriteSpec(dir, "/var/lib/lpu/bin/lpu-nri", state)
	if err != nil || !changed {
		t.Fatalf("WriteSpec = %v, %v; want written", changed, err)
	}
	if changed, err = WriteSpec(dir, "/var/lib/lpu/bin/lpu-nri", state); err != nil || changed {
		t.Fatalf("second WriteSpec = %v, %v; want unchanged", changed, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, inject.GuardDevice); err != nil {
		t.Fatalf("inject %s: %v", inject.GuardDevice, err)
	}
	hooks := spec.Hooks.CreateRuntime
	if len(hooks) != 1 || len(spec.Linux.Devices) != 0 || len(spec.Mounts) != 0 || len(spec.Process.Env) != 0 {
		t.Fatalf("guard device edits: hooks %+v, devices %v, mounts %v, env %v; want one hook only", hooks, spec.Linux.Devices, spec.Mounts, spec.Process.Env)
	}
	h := hooks[0]
	want := []string{"lpu-nri", Command, "--state-dir", state}
	if h.Path != "/var/lib/lpu/bin/lpu-nri" || strings.Join(h.Args, " ") != strings.Join(want, " ") || h.Timeout == nil || *h.Timeout != HookTimeout {
		t.Fatalf("hook %+v; want %v with timeout %d", h, want, HookTimeout)
	}
	if _, err := Spec("bin/lpu-nri", state); err == nil {
		t.Error("a relative hook path was accepted")
	}
}

// node is a state dir with a key, and the hook's input for containers.
type node struct {
	state string
	key   *inject.Key
}

func newNode(t *testing.T) node {
	t.Helper()
	dir := t.TempDir()
	k, err := inject.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return node{state: dir, key: k}
}

func stateJSON(t testing.TB, id, bundle string, ann map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(oci.State{Version: oci.Version, ID: id, Status: oci.StateCreating, Pid: 1, Bundle: bundle, Annotations: ann})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheck: only the container's own proof under this node's key lets
// it start; everything else is refused with ErrNotVerified or a reason.
func TestCheck(t *testing.T) {
	n := newNode(t)
	other, err := inject.NewKey(bytes.Repeat([]byte{9}, inject.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("ab", 32)
	ok := map[string]string{inject.AnnotationVerified: n.key.VerifiedToken(id), inject.AnnotationDevices: "lpu0"}
	bundle := t.TempDir()
	cfg, _ := json.Marshal(oci.Spec{Version: oci.Version, Annotations: ok})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		in        []byte
		notVerify bool // want ErrNotVerified
		pass      bool
	}{
		"own proof":                          {in: stateJSON(t, id, "", ok), pass: true},
		"proof only in the bundle's spec":    {in: stateJSON(t, id, bundle, nil), pass: true},
		"no proof (created without lpu-nri)": {in: stateJSON(t, id, "", map[string]string{inject.AnnotationDevices: "lpu0"}), notVerify: true},
		"another container's proof":          {in: stateJSON(t, "cd"+id[2:], "", ok), notVerify: true},
		"another key's proof":                {in: stateJSON(t, id, "", map[string]string{inject.AnnotationVerified: other.VerifiedToken(id)}), notVerify: true},
		"v2 prefix":                          {in: stateJSON(t, id, "", map[string]string{inject.AnnotationVerified: "v2" + n.key.VerifiedToken(id)[2:]}), notVerify: true},
		"upper-case digits":                  {in: stateJSON(t, id, "", map[string]string{inject.AnnotationVerified: "v1:" + strings.ToUpper(n.key.VerifiedToken(id)[3:])}), notVerify: true},
		"empty ID":                           {in: stateJSON(t, "", "", map[string]string{inject.AnnotationVerified: n.key.VerifiedToken("")}), notVerify: true},
		"not JSON":                           {in: []byte("{")},
		"bundle without config.json":         {in: stateJSON(t, id, t.TempDir(), nil)},
		"state over 1 MiB":                   {in: append(stateJSON(t, id, "", ok), bytes.Repeat([]byte(" "), maxState)...)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := Check(bytes.NewReader(tc.in), n.state)
			switch {
			case tc.pass && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.pass && err == nil:
				t.Fatal("accepted")
			case tc.notVerify && !errors.Is(err, inject.ErrNotVerified):
				t.Fatalf("err %v, want ErrNotVerified", err)
			}
		})
	}
}

// TestCheckNoKey: a state dir without a key refuses, and the hook does not
// make one there.
func TestCheckNoKey(t *testing.T) {
	dir := t.TempDir()
	err := Check(bytes.NewReader(stateJSON(t, "c1", "", map[string]string{inject.AnnotationVerified: "v1:00"})), dir)
	if err == nil {
		t.Fatal("accepted without a key")
	}
	if _, statErr := os.Stat(filepath.Join(dir, inject.KeyFileName)); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatalf("the hook created a key: %v", statErr)
	}
}

// TestMainExit: the hook's exit status and message, as runc sees them.
func TestMainExit(t *testing.T) {
	n := newNode(t)
	id := "c1"
	var stderr bytes.Buffer
	in := stateJSON(t, id, "", map[string]string{inject.AnnotationVerified: n.key.VerifiedToken(id)})
	if code := Main([]string{"--state-dir", n.state}, bytes.NewReader(in), &stderr); code != 0 {
		t.Fatalf("verified: exit %d (%s)", code, stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"--state-dir", n.state}, bytes.NewReader(stateJSON(t, id, "", nil)), &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "lpu-nri guard: refusing to start the container") {
		t.Fatalf("unverified: exit %d, stderr %q", code, stderr.String())
	}
	for _, args := range [][]string{nil, {"--state-dir", "rel"}, {"--state-dir", n.state, "extra"}} {
		stderr.Reset()
		if code := Main(args, bytes.NewReader(in), &stderr); code == 0 {
			t.Errorf("args %q: exit 0", args)
		}
	}
}

// TestInstallFrom: a copy with the same bytes and mode 0755; an identical
// copy is not rewritten, a changed executable replaces it.
func TestInstallFrom(t *testing.T) {
	src := filepath.Join(t.TempDir(), "lpu-nri")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	dst, err := InstallFrom(src, state)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(dst)
	if err != nil || st1.Mode().Perm() != 0o755 {
		t.Fatalf("installed %s: %v, mode %v", dst, err, st1.Mode())
	}
	if _, err := InstallFrom(src, state); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(dst)
	if !os.SameFile(st1, st2) {
		t.Error("an identical copy was rewritten")
	}
	if err := os.WriteFile(src, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallFrom(src, state); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "binary v2" {
		t.Fatalf("after an upgrade the copy holds %q", b)
	}
	left, _ := filepath.Glob(filepath.Join(state, "bin", ".lpu-nri-*"))
	if len(left) > 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// FuzzCheck: any input is refused or accepted without panic, and accepted
// only when it names an ID and carries that ID's proof.
func FuzzCheck(f *testing.F) {
	dir := f.TempDir()
	key, err := inject.LoadOrCreateKey(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(stateJSON(f, "c1", "", map[string]string{inject.AnnotationVerified: key.VerifiedToken("c1")}))
	f.Add(stateJSON(f, "c1", "", nil))
	f.Add([]byte(`{"id":"c1","annotations":{"lpu.hyperaccel.ai/verified":"v1:"}}`))
	f.Add([]byte(`{"id":1}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := Check(bytes.NewReader(in), dir); err != nil {
			return
		}
		var st state
		if json.Unmarshal(in, &st) != nil || st.Annotations[inject.AnnotationVerified] != key.VerifiedToken(st.ID) {
			t.Fatalf("accepted %q without its proof", in)
		}
	})
}

// TestInstallRefusesForeignOwners is F5 of the fourth round: runc runs
// the hook as root, so a state dir, bin/ or copy that another uid owns or
// that group/others can write is refused (an error naming it, no path to
// put in a spec), as the seal key and the ledger are.
func TestInstallRefusesForeignOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	src := filepath.Join(t.TempDir(), "lpu-nri")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, state string)
		want  string
	}{
		{"bin owned by another uid", func(t *testing.T, state string) {
			must(t, os.Mkdir(filepath.Join(state, "bin"), 0o755))
			must(t, os.Chown(filepath.Join(state, "bin"), 65534, 65534))
		}, "owned by uid 65534"},
		{"bin writable by others", func(t *testing.T, state string) {
			must(t, os.Mkdir(filepath.Join(state, "bin"), 0o755))
			must(t, os.Chmod(filepath.Join(state, "bin"), 0o777))
		}, "lets group/others write"},
		{"bin a symlink to a foreign dir", func(t *testing.T, state string) {
			other := t.TempDir()
			must(t, os.Chown(other, 65534, 65534))
			must(t, os.Symlink(other, filepath.Join(state, "bin")))
		}, "is not a directory"},
		{"state dir owned by another uid", func(t *testing.T, state string) {
			must(t, os.Chown(state, 65534, 65534))
		}, "owned by uid 65534"},
		{"identical copy owned by another uid", func(t *testing.T, state string) {
			must(t, os.Mkdir(filepath.Join(state, "bin"), 0o755))
			dst := filepath.Join(state, "bin", "lpu-nri")
			must(t, os.WriteFile(dst, []byte("binary v1"), 0o755))
			must(t, os.Chmod(dst, 0o755))
			must(t, os.Chown(dst, 65534, 65534))
		}, "owned by uid 65534"},
		{"copy hard-linked", func(t *testing.T, state string) {
			must(t, os.Mkdir(filepath.Join(state, "bin"), 0o755))
			dst := filepath.Join(state, "bin", "lpu-nri")
			must(t, os.WriteFile(dst, []byte("binary v1"), 0o755))
			must(t, os.Chmod(dst, 0o755))
			must(t, os.Link(dst, filepath.Join(state, "other-name")))
		}, "links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			tc.setup(t, state)
			path, err := InstallFrom(src, state)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InstallFrom = %q, %v; want an error with %q", path, err, tc.want)
			}
			if path != "" {
				t.Errorf("a path was returned for the spec: %q", path)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
