// Command chartoci writes a packaged Helm chart (the .tgz of `helm package`)
// as an OCI image layout archive holding the chart as an OCI artifact, in the
// form `helm push` uploads: a manifest whose config is the chart metadata
// (application/vnd.cncf.helm.config.v1+json) and whose one layer is the .tgz
// (application/vnd.cncf.helm.chart.content.v1.tar+gzip), tagged with the
// chart version. Tools that copy OCI layouts to a registry (oras cp
// --from-oci-layout, skopeo, crane) then publish the same artifact `helm
// push` would, without a registry at build time.
//
// usage: chartoci CHART.tgz OUT.tar
//
// The archive is reproducible: SOURCE_DATE_EPOCH (default 0) dates every
// entry and the created annotation.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// Media types of a Helm chart stored in an OCI registry (Helm ≥ 3.8).
const (
	configMediaType   = "application/vnd.cncf.helm.config.v1+json"
	contentMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	manifestMediaType = "application/vnd.oci.image.manifest.v1+json"
	// maxChartFile bounds what is read of Chart.yaml inside the package.
	maxChartFile = 1 << 20
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	Manifests     []descriptor `json:"manifests"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: chartoci CHART.tgz OUT.tar")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		fmt.Fprintln(os.Stderr, "chartoci:", err)
		os.Exit(1)
	}
}

func run(chartPath, out, epoch string) error {
	secs := int64(0)
	if epoch != "" {
		var err error
		if secs, err = strconv.ParseInt(epoch, 10, 64); err != nil || secs < 0 {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
		}
	}
	mtime := time.Unix(secs, 0).UTC()
	tgz, err := os.ReadFile(chartPath)
	if err != nil {
		return fmt.Errorf("read chart: %w", err)
	}
	meta, err := chartMetadata(tgz)
	if err != nil {
		return fmt.Errorf("%s: %w", chartPath, err)
	}
	var ids struct {
		Name        string            `json:"name"`
		Version     string            `json:"version"`
		Description string            `json:"description"`
		Home        string            `json:"home"`
		Sources     []string          `json:"sources"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(meta, &ids); err != nil || ids.Name == "" || ids.Version == "" {
		return fmt.Errorf("%s: Chart.yaml needs name and version (got %q %q)", chartPath, ids.Name, ids.Version)
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) descriptor {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	m := manifest{
		SchemaVersion: 2,
		MediaType:     manifestMediaType,
		Config:        add(configMediaType, meta),
		Layers:        []descriptor{add(contentMediaType, tgz)},
		Annotations:   annotations(ids.Name, ids.Version, ids.Description, ids.Home, ids.Sources, ids.Annotations, mtime),
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	md := add(manifestMediaType, mb)
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": ids.Version}
	ib, err := json.Marshal(index{SchemaVersion: 2, Manifests: []descriptor{md}})
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	return writeLayout(out, mtime, ib, blobs)
}

// annotations are the manifest annotations `helm push` writes: the chart's
// own annotations, then the OCI ones derived from its metadata.
func annotations(name, version, description, home string, sources []string, chart map[string]string, created time.Time) map[string]string {
	a := map[string]string{}
	for k, v := range chart {
		a[k] = v
	}
	a["org.opencontainers.image.title"] = name
	a["org.opencontainers.image.version"] = version
	a["org.opencontainers.image.created"] = created.Format(time.RFC3339)
	if description != "" {
		a["org.opencontainers.image.description"] = description
	}
	if home != "" {
		a["org.opencontainers.image.url"] = home
	}
	if len(sources) > 0 {
		a["org.opencontainers.image.source"] = sources[0]
	}
	return a
}

// chartMetadata returns NAME/Chart.yaml of the packaged chart as JSON, the
// form Helm stores as the artifact's config.
func chartMetadata(tgz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("not a gzip chart package: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no Chart.yaml at the top of the package")
		}
		if err != nil {
			return nil, fmt.Errorf("read chart package: %w", err)
		}
		// The chart's own Chart.yaml is NAME/Chart.yaml; subcharts sit deeper.
		if dir, file := path.Split(h.Name); file != "Chart.yaml" || dir == "" || path.Dir(path.Clean(dir)) != "." {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxChartFile+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Name, err)
		}
		if len(b) > maxChartFile {
			return nil, fmt.Errorf("%s is larger than %d bytes", h.Name, maxChartFile)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		return j, nil
	}
}

// writeLayout writes an OCI image layout (oci-layout, index.json,
// blobs/sha256/*) as a tar archive, entries sorted, dated mtime.
func writeLayout(out string, mtime time.Time, idx []byte, blobs map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	file := func(name string, b []byte) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, ModTime: mtime, Typeflag: tar.TypeDir, Format: tar.FormatPAX})
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	slices.Sort(digests)
	steps := []func() error{
		func() error { return dir("blobs/") },
		func() error { return dir("blobs/sha256/") },
	}
	for _, d := range digests {
		steps = append(steps, func() error { return file("blobs/sha256/"+d[len("sha256:"):], blobs[d]) })
	}
	steps = append(steps,
		func() error { return file("index.json", idx) },
		func() error { return file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)) },
		tw.Close)
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("write layout: %w", err)
		}
	}
	return atomicfile.Write(out, buf.Bytes(), atomicfile.WithMode(0o644))
}
