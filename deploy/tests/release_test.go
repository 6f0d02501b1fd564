package tests_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// TestRelease runs deploy/release.sh (what `make release` runs) with the
// VERSION file's version and checks dist/: the image is one OCI image index
// holding linux/amd64 and linux/arm64 images whose configs and binaries are
// of that architecture, the three binaries run from the amd64 image and print the
// version, the chart package and its OCI artifact agree, the manifests pull
// that image tag, the kubectl-lpu archives hold the plugin of their
// architecture (it prints the version), its completion helper and the
// licence, the krew manifest names them with their sha256, the SBOMs are
// CycloneDX naming our module, and SHA256SUMS covers and verifies every file.
func TestRelease(t *testing.T) {
	if testing.Short() || os.Getenv("LPU_RELEASE_TEST") != "1" {
		// minutes of cross-builds: its own step with its own budget
		t.Skip("cross-builds both daemons for two architectures; LPU_RELEASE_TEST=1 runs it (test/check.sh release)")
	}
	umoci, err := exec.LookPath("umoci")
	if err != nil {
		t.Skip("umoci not installed (apt-get install umoci)")
	}
	helm := charttest.Helm(t)
	want, err := versionSh(t)
	if err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute) // under check.sh release's -timeout 40m
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "release.sh")
	cmd.Env = append(os.Environ(), "DIST="+dist, "HELM="+helm, "SOURCE_DATE_EPOCH=1700000000",
		"REVISION=0123456789abcdef0123456789abcdef01234567")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, stderr.String())
	}

	t.Run("checksums", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			_, name, _ := strings.Cut(l, "  ")
			listed = append(listed, name)
		}
		wantFiles := []string{
			"lpu-node-" + want + ".tgz", "lpu-node-" + want + ".yaml",
			"lpu-node-chart-" + want + ".oci.tar", "lpu-node-image-" + want + ".oci.tar",
		}
		for _, arch := range []string{"amd64", "arm64"} {
			for _, d := range binaries {
				wantFiles = append(wantFiles, "sbom/"+d+"-"+want+"-linux-"+arch+".cdx.json")
			}
			wantFiles = append(wantFiles, pluginArchive(want, arch))
		}
		wantFiles = append(wantFiles, "krew/lpu.yaml")
		slices.Sort(wantFiles)
		if !slices.Equal(listed, wantFiles) {
			t.Errorf("SHA256SUMS lists\n %v\nwant\n %v", listed, wantFiles)
		}
		c := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		c.Dir = dist
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check: %v\n%s", err, out)
		}
	})

	t.Run("image index", func(t *testing.T) {
		layout := filepath.Join(t.TempDir(), "image")
		if err := os.MkdirAll(layout, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "tar", "-xf", filepath.Join(dist, "lpu-node-image-"+want+".oci.tar"), "-C", layout)
		type desc struct {
			MediaType   string            `json:"mediaType"`
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
			Platform    struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		}
		var top struct{ Manifests []desc }
		readJSON(t, filepath.Join(layout, "index.json"), &top)
		if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
			t.Fatalf("index.json = %+v, want one image index", top.Manifests)
		}
		if got := top.Manifests[0].Annotations["io.containerd.image.name"]; got != "ghcr.io/hyperaccel/lpu-node:"+want {
			t.Errorf("image name %q, want ghcr.io/hyperaccel/lpu-node:%s", got, want)
		}
		var idx struct {
			MediaType string `json:"mediaType"`
			Manifests []desc
		}
		readJSON(t, blobPath(layout, top.Manifests[0].Digest), &idx)
		arches := map[string]string{}
		for _, m := range idx.Manifests {
			if m.Platform.OS != "linux" || m.MediaType != "application/vnd.oci.image.manifest.v1+json" {
				t.Errorf("index entry %+v: want a linux image manifest", m)
			}
			arches[m.Platform.Architecture] = m.Digest
		}
		if len(arches) != 2 || arches["amd64"] == "" || arches["arm64"] == "" {
			t.Fatalf("image index platforms %v, want linux/amd64 and linux/arm64", arches)
		}
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
		for arch, digest := range arches {
			var manifest struct {
				Config struct{ Digest string } `json:"config"`
			}
			readJSON(t, blobPath(layout, digest), &manifest)
			var cfg struct {
				Architecture string `json:"architecture"`
				OS           string `json:"os"`
				Config       struct {
					Labels map[string]string `json:"Labels"`
				} `json:"config"`
			}
			readJSON(t, blobPath(layout, manifest.Config.Digest), &cfg)
			if cfg.Architecture != arch || cfg.OS != "linux" {
				t.Errorf("%s image config says %s/%s", arch, cfg.OS, cfg.Architecture)
			}
			if cfg.Config.Labels["org.opencontainers.image.version"] != want ||
				cfg.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
				t.Errorf("%s image labels %v", arch, cfg.Config.Labels)
			}
			// umoci unpacks a single-platform image; give it a tag for this one.
			single := filepath.Join(t.TempDir(), "single")
			run(t, "cp", "-a", layout, single)
			idxJSON := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` +
				digest + `","size":` + sizeOf(t, blobPath(single, digest)) + `,"annotations":{"org.opencontainers.image.ref.name":"x"}}]}`
			if err := os.WriteFile(filepath.Join(single, "index.json"), []byte(idxJSON), 0o644); err != nil {
				t.Fatal(err)
			}
			bundle := filepath.Join(t.TempDir(), "bundle")
			args := []string{"unpack", "--image", single + ":x", bundle}
			if os.Geteuid() != 0 {
				args = append([]string{"unpack", "--rootless"}, args[1:]...)
			}
			run(t, umoci, args...)
			for _, d := range []string{"lpu-device-plugin", "lpu-nri", "lpu-dra"} {
				bin := filepath.Join(bundle, "rootfs", "usr", "bin", d)
				f, err := elf.Open(bin)
				if err != nil {
					t.Errorf("%s %s: %v", arch, d, err)
					continue
				}
				if f.Machine != machine[arch] {
					t.Errorf("%s image: %s is built for %v", arch, d, f.Machine)
				}
				f.Close()
				if arch == "amd64" {
					out := run(t, bin, "--version")
					if got := strings.TrimSpace(out); got != d+" "+want {
						t.Errorf("amd64 image: %s --version = %q, want %q", d, got, d+" "+want)
					}
				}
			}
		}
	})

	t.Run("chart", func(t *testing.T) {
		tgz := filepath.Join(dist, "lpu-node-"+want+".tgz")
		out, err := charttest.RunHelm(t, helm, "show", "chart", tgz)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"version: " + want, "appVersion: " + want} {
			if !strings.Contains(string(out), line+"\n") {
				t.Errorf("packaged Chart.yaml lacks %q:\n%s", line, out)
			}
		}
		checkChartArtifact(t, filepath.Join(dist, "lpu-node-chart-"+want+".oci.tar"), tgz, want)
		m, err := os.ReadFile(filepath.Join(dist, "lpu-node-"+want+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(m), "image: ghcr.io/hyperaccel/lpu-node:"+want+"\n"); n != 2 {
			t.Errorf("release manifests reference the %s image %d times, want 2", want, n)
		}
		decode(t, m)
	})

	t.Run("push and install from a registry", func(t *testing.T) {
		checkPush(t, dist, helm, want)
	})

	t.Run("kubectl-lpu", func(t *testing.T) {
		checkPlugin(t, dist, want)
	})

	t.Run("sbom", func(t *testing.T) {
		for _, arch := range []string{"amd64", "arm64"} {
			for _, d := range binaries {
				var bom struct {
					BOMFormat   string `json:"bomFormat"`
					SpecVersion string `json:"specVersion"`
					Metadata    struct {
						Component struct {
							Name       string `json:"name"`
							Properties []struct{ Name, Value string }
						} `json:"component"`
					} `json:"metadata"`
					Components []struct {
						Name    string `json:"name"`
						Version string `json:"version"`
					} `json:"components"`
				}
				readJSON(t, filepath.Join(dist, "sbom", d+"-"+want+"-linux-"+arch+".cdx.json"), &bom)
				if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/hyperaccel/lpu-node" {
					t.Errorf("%s %s SBOM: format %q, component %q", d, arch, bom.BOMFormat, bom.Metadata.Component.Name)
				}
				var goarch string
				for _, p := range bom.Metadata.Component.Properties {
					if p.Name == "cdx:gomod:build:env:GOARCH" {
						goarch = p.Value
					}
				}
				if goarch != arch {
					t.Errorf("%s %s SBOM records GOARCH %q", d, arch, goarch)
				}
				var names []string
				for _, c := range bom.Components {
					names = append(names, c.Name)
				}
				if !slices.Contains(names, "github.com/containerd/nri") && d == "lpu-nri" {
					t.Errorf("lpu-nri %s SBOM lacks github.com/containerd/nri: %v", arch, names)
				}
				if len(names) < 5 {
					t.Errorf("%s %s SBOM lists only %v", d, arch, names)
				}
			}
		}
	})
}

// binaries are the programs a release builds, each with its SBOM.
var binaries = []string{"lpu-device-plugin", "lpu-nri", "lpu-dra", "kubectl-lpu"}

// pluginArchive is the name of the kubectl-lpu archive of version for
// linux/arch in dist/.
func pluginArchive(version, arch string) string {
	return "kubectl-lpu-" + version + "-linux-" + arch + ".tar.gz"
}

// checkPlugin: each kubectl-lpu archive holds exactly the plugin (built for
// its architecture; the amd64 one prints version), kubectl_complete-lpu and
// the LICENSE, owned by root; dist/krew/lpu.yaml is a krew Plugin of the
// version whose platforms name each archive with its sha256 and only files
// the archive holds.
func checkPlugin(t *testing.T, dist, version string) {
	t.Helper()
	licence, err := os.ReadFile(filepath.Join("..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	held := map[string][]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		dir := t.TempDir()
		run(t, "tar", "-xzf", filepath.Join(dist, pluginArchive(version, arch)), "-C", dir)
		listing := run(t, "tar", "-tzvf", filepath.Join(dist, pluginArchive(version, arch)))
		for _, l := range strings.Split(strings.TrimSpace(listing), "\n") {
			f := strings.Fields(l)
			if len(f) < 6 || f[1] != "0/0" {
				t.Errorf("%s: entry %q is not owned by 0/0", arch, l)
				continue
			}
			held[arch] = append(held[arch], f[len(f)-1])
		}
		if !slices.Equal(held[arch], []string{"LICENSE", "kubectl-lpu", "kubectl_complete-lpu"}) {
			t.Errorf("%s archive holds %v", arch, held[arch])
		}
		if b, err := os.ReadFile(filepath.Join(dir, "LICENSE")); err != nil || !bytes.Equal(b, licence) {
			t.Errorf("%s archive: LICENSE differs from the repository's (%v)", arch, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "kubectl_complete-lpu")); err != nil || !strings.Contains(string(b), "kubectl lpu __complete") {
			t.Errorf("%s archive: kubectl_complete-lpu = %q (%v)", arch, b, err)
		}
		bin := filepath.Join(dir, "kubectl-lpu")
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("%s kubectl-lpu: %v", arch, err)
			continue
		}
		if f.Machine != machine[arch] {
			t.Errorf("%s archive: kubectl-lpu is built for %v", arch, f.Machine)
		}
		f.Close()
		if arch == "amd64" {
			if got := strings.TrimSpace(run(t, bin, "--version")); got != "kubectl-lpu "+version {
				t.Errorf("kubectl-lpu --version = %q, want %q", got, "kubectl-lpu "+version)
			}
			if got := run(t, bin, "version", "--client"); got != "Client Version: "+version+"\n" {
				t.Errorf("kubectl-lpu version --client = %q", got)
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join(dist, "krew", "lpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("krew/lpu.yaml: %v\n%s", err, raw)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "lpu" ||
		m.Spec.Version != "v"+version || m.Spec.Homepage == "" || m.Spec.ShortDescription == "" || m.Spec.Description == "" ||
		!strings.Contains(m.Spec.Caveats, "kubectl_complete-lpu") {
		t.Errorf("krew/lpu.yaml: %+v", m)
	}
	if strings.Contains(string(raw), "@") {
		t.Errorf("krew/lpu.yaml has a placeholder left:\n%s", raw)
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		arch := p.Selector.MatchLabels["arch"]
		seen[arch] = true
		if p.Selector.MatchLabels["os"] != "linux" || !strings.HasSuffix(p.URI, "/v"+version+"/"+pluginArchive(version, arch)) || p.Bin != "kubectl-lpu" {
			t.Errorf("krew platform %s: %+v", arch, p)
		}
		if sum := fileSum(t, filepath.Join(dist, pluginArchive(version, arch))); p.SHA256 != sum {
			t.Errorf("krew platform %s: sha256 %s, the archive's is %s", arch, p.SHA256, sum)
		}
		for _, f := range p.Files {
			if !slices.Contains(held[arch], f.From) || f.To != "." {
				t.Errorf("krew platform %s: file %+v is not in the archive %v", arch, f, held[arch])
			}
		}
	}
	if len(m.Spec.Platforms) != 2 || !seen["amd64"] || !seen["arm64"] {
		t.Errorf("krew platforms %v, want linux/amd64 and linux/arm64", seen)
	}
}

func sizeOf(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(fi.Size(), 10)
}

// checkChartArtifact: the OCI layout holds, under tag version, the manifest
// `helm push` writes: config = the chart's metadata (Helm's config media
// type), one layer = the .tgz byte for byte.
func checkChartArtifact(t *testing.T, archive, tgz, version string) {
	t.Helper()
	layout := filepath.Join(t.TempDir(), "chart")
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", archive, "-C", layout)
	var top struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		}
	}
	readJSON(t, filepath.Join(layout, "index.json"), &top)
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("chart layout index %+v, want one manifest tagged %s", top.Manifests, version)
	}
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	var m struct {
		MediaType string `json:"mediaType"`
		Config    desc   `json:"config"`
		Layers    []desc `json:"layers"`
	}
	readJSON(t, blobPath(layout, top.Manifests[0].Digest), &m)
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" ||
		m.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" || len(m.Layers) != 1 ||
		m.Layers[0].MediaType != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" {
		t.Fatalf("chart manifest %+v is not a Helm chart artifact", m)
	}
	if got := "sha256:" + fileSum(t, tgz); m.Layers[0].Digest != got {
		t.Errorf("chart layer %s, the .tgz is %s", m.Layers[0].Digest, got)
	}
	for _, d := range append([]desc{m.Config}, m.Layers...) {
		if got := "sha256:" + fileSum(t, blobPath(layout, d.Digest)); got != d.Digest {
			t.Errorf("blob %s has content %s", d.Digest, got)
		}
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readJSON(t, blobPath(layout, m.Config.Digest), &meta)
	if meta.APIVersion != "v2" || meta.Name != "lpu-node" || meta.Version != version || meta.AppVersion != version {
		t.Errorf("chart artifact config %+v", meta)
	}
}

// checkPush does what the README tells an operator: copies the image index
// to a real registry (Debian's docker-registry on loopback) with skopeo,
// pushes the chart with helm push, also copies chartoci's OCI artifact with
// skopeo, pulls that back with helm (byte-identical .tgz) and renders the
// chart from its OCI reference.
func checkPush(t *testing.T, dist, helm, version string) {
	t.Helper()
	registry, err1 := exec.LookPath("docker-registry")
	skopeo, err2 := exec.LookPath("skopeo")
	if err1 != nil || err2 != nil {
		t.Skip("needs docker-registry and skopeo (apt-get install docker-registry skopeo; test/e2e/tools.sh apt)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "+dir+"/data\nhttp:\n  addr: "+addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := exec.Command(registry, "serve", cfg)
	reg.Stdout, reg.Stderr = &logs, &logs
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.Process.Kill()
		_ = reg.Wait()
	})
	for i := 0; ; i++ {
		if rsp, err := http.Get("http://" + addr + "/v2/"); err == nil {
			rsp.Body.Close()
			break
		}
		if i == 100 {
			t.Fatalf("registry did not answer on %s:\n%s", addr, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	image := filepath.Join(dist, "lpu-node-image-"+version+".oci.tar")
	run(t, skopeo, "copy", "--all", "--dest-tls-verify=false", "oci-archive:"+image, "docker://"+addr+"/lpu-node:"+version)
	var index struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Platform struct{ Architecture string } `json:"platform"`
		} `json:"manifests"`
	}
	raw := run(t, skopeo, "inspect", "--raw", "--tls-verify=false", "docker://"+addr+"/lpu-node:"+version)
	if err := json.Unmarshal([]byte(raw), &index); err != nil || index.MediaType != "application/vnd.oci.image.index.v1+json" || len(index.Manifests) != 2 {
		t.Errorf("registry serves %s as %.300s (%v), want the two-platform index", version, raw, err)
	}

	if _, err := charttest.RunHelm(t, helm, "push", filepath.Join(dist, "lpu-node-"+version+".tgz"), "oci://"+addr+"/charts", "--plain-http"); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(t.TempDir(), "chart")
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", filepath.Join(dist, "lpu-node-chart-"+version+".oci.tar"), "-C", layout)
	run(t, skopeo, "copy", "--dest-tls-verify=false", "oci:"+layout+":"+version, "docker://"+addr+"/artifact/lpu-node:"+version)
	pulled := t.TempDir()
	if _, err := charttest.RunHelm(t, helm, "pull", "oci://"+addr+"/artifact/lpu-node", "--version", version, "--plain-http", "-d", pulled); err != nil {
		t.Fatal(err)
	}
	if a, b := fileSum(t, filepath.Join(pulled, "lpu-node-"+version+".tgz")), fileSum(t, filepath.Join(dist, "lpu-node-"+version+".tgz")); a != b {
		t.Errorf("helm pull of chartoci's artifact gave a different .tgz (%s vs %s)", a, b)
	}
	for _, repo := range []string{"charts", "artifact"} {
		out, err := charttest.RunHelm(t, helm, "template", "lpu-node", "oci://"+addr+"/"+repo+"/lpu-node", "--version", version,
			"--plain-http", "-n", "kube-system", "--kube-version", charttest.KubeVersion, "--skip-tests", "--set", "image.repository="+addr+"/lpu-node")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(out), "image: "+addr+"/lpu-node:"+version+"\n"); n != 2 {
			t.Errorf("chart from oci://%s/%s/lpu-node references the pushed image %d times, want 2", addr, repo, n)
		}
	}
}
