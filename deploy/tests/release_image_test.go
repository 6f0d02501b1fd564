package tests_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// TestBuildOCI builds the image twice with deploy/container/build-oci.sh and
// checks that the archives are byte-identical, that umoci accepts the layout,
// that the image names itself for `ctr images import`, carries the OCI
// labels, and that the three binaries in it are static and print the version.
// Importing into a running containerd is the end-to-end suite's job.
func TestBuildOCI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both daemons twice")
	}
	umoci, err := exec.LookPath("umoci")
	if err != nil {
		t.Skip("umoci not installed (apt-get install umoci, or test/e2e/tools.sh apt)")
	}
	const (
		version = "0.0.0-test"
		image   = "example.test/lpu-node"
		epoch   = "1700000000"
		created = "2023-11-14T22:13:20Z"
		// Fixed, so a commit landing between the two builds cannot change
		// the label (the shared tree keeps moving while tests run).
		revision = "0123456789abcdef0123456789abcdef01234567"
	)
	dir := t.TempDir()
	build := func(out string) string {
		t.Helper()
		// Cross-building three daemons is minutes on a cold, busy 2-core
		// machine: the budget is what is left of the test binary's own
		// (check.sh's -timeout), so a slow machine makes it slower, not red.
		ctx, cancel := untilDeadline(t)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "container/build-oci.sh", out, version)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+epoch, "IMAGE="+image, "REVISION="+revision)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("build-oci.sh: %v\n%s", err, stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	digestA, digestB := build(a), build(b)
	if !strings.HasPrefix(digestA, "sha256:") || digestA != digestB {
		t.Errorf("manifest digests differ or are malformed: %q vs %q", digestA, digestB)
	}
	if sumA, sumB := fileSum(t, a), fileSum(t, b); sumA != sumB {
		t.Errorf("archives differ: sha256 %s vs %s (not reproducible)", sumA, sumB)
	}

	layout := filepath.Join(dir, "layout")
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", a, "-C", layout)
	run(t, umoci, "stat", "--image", layout+":"+version)

	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	if m.Digest != digestA {
		t.Errorf("index digest %s, script printed %s", m.Digest, digestA)
	}
	if got := m.Annotations["io.containerd.image.name"]; got != image+":"+version {
		t.Errorf("io.containerd.image.name = %q, want %s:%s", got, image, version)
	}

	var manifest struct {
		Config struct{ Digest string } `json:"config"`
	}
	readJSON(t, blobPath(layout, m.Digest), &manifest)
	var imageConfig struct {
		Created string `json:"created"`
		Config  struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	}
	readJSON(t, blobPath(layout, manifest.Config.Digest), &imageConfig)
	checks := map[string]struct{ got, want string }{
		"created":    {imageConfig.Created, created},
		"user":       {imageConfig.Config.User, "65532:65532"},
		"entrypoint": {strings.Join(imageConfig.Config.Entrypoint, " "), "/usr/bin/lpu-device-plugin"},
		"version":    {imageConfig.Config.Labels["org.opencontainers.image.version"], version},
		"title":      {imageConfig.Config.Labels["org.opencontainers.image.title"], "lpu-node"},
		"created l.": {imageConfig.Config.Labels["org.opencontainers.image.created"], created},
		"source":     {imageConfig.Config.Labels["org.opencontainers.image.source"], "https://github.com/hyperaccel/lpu-node"},
		"revision":   {imageConfig.Config.Labels["org.opencontainers.image.revision"], revision},
		"licenses":   {imageConfig.Config.Labels["org.opencontainers.image.licenses"], "Apache-2.0"},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("image config %s = %q, want %q", name, c.got, c.want)
		}
	}

	bundle := filepath.Join(dir, "bundle")
	args := []string{"unpack", "--image", layout + ":" + version, bundle}
	if os.Geteuid() != 0 {
		args = append([]string{"unpack", "--rootless"}, args[1:]...)
	}
	run(t, umoci, args...)
	rootfs := filepath.Join(bundle, "rootfs")
	for _, name := range []string{"lpu-device-plugin", "lpu-nri", "lpu-dra"} {
		bin := filepath.Join(rootfs, "usr", "bin", name)
		fi, err := os.Stat(bin)
		if err != nil {
			t.Errorf("%s not in the image: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", name, fi.Mode().Perm())
		}
		if f, err := elf.Open(bin); err != nil {
			t.Errorf("%s: %v", name, err)
		} else {
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s is dynamically linked; the image has no libc", name)
				}
			}
			f.Close()
		}
		out := run(t, bin, "--version")
		if want := name + " " + version; strings.TrimSpace(out) != want {
			t.Errorf("%s --version = %q, want %q", name, strings.TrimSpace(out), want)
		}
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil {
		t.Errorf("no CA bundle for TLS to an OTLP collector: %v", err)
	}
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") || !strings.HasPrefix(string(passwd), "root:x:0:0:") {
		t.Errorf("/etc/passwd = %q (%v), want root and nonroot", passwd, err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func blobPath(layout, digest string) string {
	algo, hexDigest, _ := strings.Cut(digest, ":")
	return filepath.Join(layout, "blobs", algo, hexDigest)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestImageLabelsAgree: the Dockerfile and build-oci.sh put the same OCI
// label keys on the image, so the two builds cannot drift apart.
func TestImageLabelsAgree(t *testing.T) {
	re := regexp.MustCompile(`org\.opencontainers\.image\.[a-z]+=`)
	keys := func(file string) []string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Comments may mention labels; only code lines count.
		found := re.FindAllString(charttest.StripComments(string(b)), -1)
		slices.Sort(found)
		return slices.Compact(found)
	}
	docker, script := keys("container/Dockerfile"), keys("container/build-oci.sh")
	if len(docker) < 6 || !slices.Equal(docker, script) {
		t.Errorf("OCI labels differ:\n Dockerfile   %v\n build-oci.sh %v", docker, script)
	}
}

// untilDeadline returns a context that ends a minute before the test
// binary's -timeout, so a child process is killed (and the test fails
// naming it) before go test panics; without -timeout, 30 minutes.
func untilDeadline(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	d, ok := t.Deadline()
	if !ok {
		return context.WithTimeout(context.Background(), 30*time.Minute)
	}
	return context.WithDeadline(context.Background(), d.Add(-time.Minute))
}
