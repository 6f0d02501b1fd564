package tests_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// versionSh runs deploy/version.sh with args and returns what it printed.
func versionSh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", append([]string{"version.sh"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: stderr.Bytes()}
	}
	return strings.TrimSpace(string(out)), nil
}

// TestVersionSingleSource: the VERSION file is the one version. The chart's
// version and appVersion, the image tag and version label in the rendered
// manifests, the `-X main.version` the Makefile links in, and every image
// reference the docs show agree with it, and none carries a "v" prefix (an
// image tagged v0.1.0 next to a chart asking for 0.1.0 is ImagePullBackOff).
func TestVersionSingleSource(t *testing.T) {
	want, err := versionSh(t)
	if err != nil {
		t.Fatalf("version.sh: %v", err)
	}
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != want || strings.HasPrefix(got, "v") {
		t.Errorf("VERSION file %q, version.sh %q: want the same, without a v prefix", got, want)
	}

	var chart struct {
		Version     string            `json:"version"`
		AppVersion  string            `json:"appVersion"`
		Annotations map[string]string `json:"annotations"`
	}
	b, err = os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	if chart.Version != want || chart.AppVersion != want {
		t.Errorf("Chart.yaml version %q appVersion %q, want both %q", chart.Version, chart.AppVersion, want)
	}

	m, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(string(m), -1)
	if len(images) < 2 {
		t.Fatalf("%s: %d image references, want both containers", manifestsFile, len(images))
	}
	for _, img := range images {
		if !strings.HasSuffix(img[1], ":"+want) {
			t.Errorf("%s: image %s, want tag %s", manifestsFile, img[1], want)
		}
	}
	labels := regexp.MustCompile(`app\.kubernetes\.io/version: "([^"]*)"`).FindAllStringSubmatch(string(m), -1)
	for _, l := range labels {
		if l[1] != want {
			t.Errorf("%s: app.kubernetes.io/version %q, want %q", manifestsFile, l[1], want)
		}
	}

	if _, err := exec.LookPath("make"); err == nil {
		out, err := exec.Command("make", "-s", "-C", "..", "-n", "build").Output()
		if err != nil {
			t.Fatalf("make -n build: %v", err)
		}
		if !strings.Contains(string(out), "-X main.version="+want+" ") && !strings.Contains(string(out), "-X main.version="+want+"'") {
			t.Errorf("make -n build links a different version:\n%s", out)
		}
		out, err = exec.Command("make", "-s", "-C", "..", "version", "VERSION=v"+want).Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("make version VERSION=v%s = %q, %v; want %s", want, out, err, want)
		}
	}

	// Docs show the tag users pull; a v-prefixed example is the bug again.
	vtag := regexp.MustCompile(`lpu-node:v[0-9]|image\.tag=v[0-9]|--version v[0-9]`)
	for _, doc := range []string{"../README.md", "README.md", "../docs/install.md", "../docs/operate.md", "container/build-oci.sh", "container/Dockerfile"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, hit := range vtag.FindAllString(string(b), -1) {
			t.Errorf("%s shows a v-prefixed version: %q", doc, hit)
		}
	}
}

// TestVersionScript: version.sh drops a git-style "v" and refuses what is not
// SemVer (helm package and OCI tags need it).
func TestVersionScript(t *testing.T) {
	cases := map[string]struct {
		in, want string
		bad      bool
	}{
		"plain":      {in: "1.2.3", want: "1.2.3"},
		"v prefix":   {in: "v1.2.3", want: "1.2.3"},
		"prerelease": {in: "v0.2.0-rc.1", want: "0.2.0-rc.1"},
		"build meta": {in: "1.0.0+abc", want: "1.0.0+abc"},
		"word":       {in: "dev", bad: true},
		"two parts":  {in: "1.2", bad: true},
		"leading 0":  {in: "01.2.3", bad: true},
		"vv":         {in: "vv1.2.3", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := versionSh(t, tc.in)
			if tc.bad {
				if err == nil {
					t.Errorf("version.sh %q = %q, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("version.sh %q = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestLicense: LICENSE is the Apache License 2.0, the chart ships the same
// text and names the licence, and both image builds label it.
func TestLicense(t *testing.T) {
	root, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Apache License", "Version 2.0, January 2004", "END OF TERMS AND CONDITIONS"} {
		if !bytes.Contains(root, []byte(s)) {
			t.Errorf("LICENSE lacks %q", s)
		}
	}
	inChart, err := os.ReadFile(chartDir + "/LICENSE")
	if err != nil || !bytes.Equal(root, inChart) {
		t.Errorf("%s/LICENSE differs from LICENSE (err %v): copy it", chartDir, err)
	}
	chart, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(chart, []byte("artifacthub.io/license: Apache-2.0")) {
		t.Error("Chart.yaml has no artifacthub.io/license: Apache-2.0 annotation")
	}
	for _, f := range []string{"container/Dockerfile", "container/build-oci.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`org\.opencontainers\.image\.licenses="?Apache-2\.0`).Match(b) {
			t.Errorf("%s does not label org.opencontainers.image.licenses=Apache-2.0", f)
		}
	}
}
