package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tgz packs files (name → content) as a gzip'd tar, as helm package does.
func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRun(t *testing.T) {
	cases := map[string]struct {
		pkg     []byte
		epoch   string
		wantErr string
	}{
		"chart":         {pkg: tgz(t, map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.2.3\nhome: https://h.test\nannotations:\n  a.test/license: MIT\n", "c/charts/s/Chart.yaml": "name: s\nversion: 9.9.9\n"})},
		"subchart only": {pkg: tgz(t, map[string]string{"c/charts/s/Chart.yaml": "name: s\nversion: 9.9.9\n"}), wantErr: "no Chart.yaml"},
		"no version":    {pkg: tgz(t, map[string]string{"c/Chart.yaml": "name: c\n"}), wantErr: "needs name and version"},
		"bad yaml":      {pkg: tgz(t, map[string]string{"c/Chart.yaml": "name: [c\n"}), wantErr: "c/Chart.yaml"},
		"not gzip":      {pkg: []byte("plain"), wantErr: "not a gzip chart package"},
		"bad epoch":     {pkg: tgz(t, map[string]string{"c/Chart.yaml": "name: c\nversion: 1.0.0\n"}), epoch: "yesterday", wantErr: "SOURCE_DATE_EPOCH"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "c.tgz"), filepath.Join(dir, "out.tar")
			if err := os.WriteFile(in, tc.pkg, 0o644); err != nil {
				t.Fatal(err)
			}
			err := run(in, out, tc.epoch)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, statErr := os.Stat(out); statErr == nil {
					t.Error("wrote an archive despite the error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// The top-level chart's metadata is the config, not the subchart's.
			if !bytes.Contains(b, []byte(`"name":"c","version":"1.2.3"}`)) || !bytes.Contains(b, []byte(`"a.test/license":"MIT"`)) || !bytes.Contains(b, []byte(`"org.opencontainers.image.url":"https://h.test"`)) ||
				!bytes.Contains(b, []byte(`"org.opencontainers.image.ref.name":"1.2.3"`)) {
				t.Errorf("archive lacks the chart config, its annotations or the tag (%d bytes)", len(b))
			}
			if err := run(in, out+"2", tc.epoch); err != nil {
				t.Fatal(err)
			}
			if b2, _ := os.ReadFile(out + "2"); !bytes.Equal(b, b2) {
				t.Error("two runs differ: not reproducible")
			}
		})
	}
}
