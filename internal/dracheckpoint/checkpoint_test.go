package dracheckpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/statedir"
)

func sample() *State {
	return &State{Claims: map[string]Claim{
		"uid-a": {UID: "uid-a", Namespace: "ns", Name: "a", Devices: []Device{{Request: "lpus", Pool: "node-1", Device: "ring0-start4-size4"}},
			LPUs: []string{"lpu4", "lpu5", "lpu6", "lpu7"}, CDIDevice: "lpu.hyperaccel.ai/claim=uid-a", SpecName: "lpu.hyperaccel.ai-claim_uid-a.json",
			Pods: []string{"pod-1"}},
		"uid-b": {UID: "uid-b", Namespace: "ns", Name: "b", Devices: []Device{{Request: "lpus/singles", Pool: "node-1", Device: "ring0-start0-size1"}, {Request: "lpus/singles", Pool: "node-1", Device: "ring0-start2-size1"}},
			LPUs: []string{"lpu0", "lpu2"}, CDIDevice: "lpu.hyperaccel.ai/claim=uid-b", SpecName: "lpu.hyperaccel.ai-claim_uid-b.json"},
	}}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("Load = %+v", got)
	}
	if h := got.Held(); !reflect.DeepEqual(h, []string{"lpu0", "lpu2", "lpu4", "lpu5", "lpu6", "lpu7"}) {
		t.Fatalf("Held = %v", h)
	}
	if got.Holder("lpu5") != "uid-a" || got.Holder("lpu1") != "" {
		t.Fatal("Holder wrong")
	}
	// No temp files left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d entries, want only the checkpoint", len(entries))
	}
}

func TestLoadMissing(t *testing.T) {
	s, err := Load(t.TempDir())
	if err != nil || len(s.Claims) != 0 {
		t.Fatalf("Load(empty dir) = %+v, %v", s, err)
	}
}

// A crash mid-write leaves a temp file, never a torn checkpoint: the old
// content stays readable.
func TestCrashLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, sample()); err != nil {
		t.Fatal(err)
	}
	// What a crash between write and rename leaves.
	if err := os.WriteFile(filepath.Join(dir, "."+FileName+".123"), []byte(`{"version":`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("after a torn temp file: %+v, %v", got, err)
	}
	// A save into a state dir that cannot be written leaves the old file.
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Chmod(dir, 0o700) }()
		s := sample()
		delete(s.Claims, "uid-a")
		if err := Save(dir, s); err == nil {
			t.Fatal("save into a read-only dir succeeded")
		}
		if got, err := Load(dir); err != nil || len(got.Claims) != 2 {
			t.Fatalf("old content lost: %+v, %v", got, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := sample().Marshal()
	tests := map[string]struct {
		data string
		want string
	}{
		"not json":       {data: "{", want: "decode"},
		"trailing":       {data: string(good) + "{}", want: "trailing data"},
		"old version":    {data: `{"version":"v0","claims":[]}`, want: `version "v0"`},
		"unknown field":  {data: `{"version":"` + Version + `","claims":[],"extra":1}`, want: "unknown field"},
		"empty uid":      {data: `{"version":"` + Version + `","claims":[{"uid":""}]}`, want: "claim 0: empty uid"},
		"no lpus":        {data: `{"version":"` + Version + `","claims":[{"uid":"u","devices":[{"pool":"p","device":"d"}]}]}`, want: "claim u: no devices"},
		"bad lpu":        {data: `{"version":"` + Version + `","claims":[{"uid":"u","lpus":["gpu0"],"devices":[{"pool":"p","device":"d"}]}]}`, want: `claim u: device id "gpu0"`},
		"spec escapes":   {data: `{"version":"` + Version + `","claims":[{"uid":"u","lpus":["lpu0"],"devices":[{"pool":"p","device":"d"}],"cdiDevice":"x","cdiSpecName":"../x"}]}`, want: "bad cdi device"},
		"held twice":     {data: strings.Replace(string(good), `"lpu0"`, `"lpu4"`, 1), want: "is also held by claim"},
		"claim twice":    {data: strings.Replace(string(good), `"uid-b"`, `"uid-a"`, 1), want: "listed twice"},
		"empty pool":     {data: strings.Replace(string(good), `"pool": "node-1"`, `"pool": ""`, 1), want: "empty pool"},
		"no such record": {data: `null`, want: "version"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	good, _ := sample().Marshal()
	f.Add(good)
	f.Add([]byte(`{"version":"` + Version + `","claims":[]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses round-trips, and no LPU has two holders.
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the state")
		}
		seen := map[string]bool{}
		for _, id := range s.Held() {
			if seen[id] {
				t.Fatalf("%s held twice", id)
			}
			seen[id] = true
		}
	})
}

func TestPodLPUs(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, sample()); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		pod    string
		claims []string
		want   string
		// notReserved: the claim is prepared, not for this pod
		// (ErrNotReserved, which lpu-nri waits out), not unknown.
		notReserved bool
		lpus        []string // PodLPUs' result when want is ""
	}{
		"prepared for the pod": {pod: "pod-1", claims: []string{"uid-a"}, lpus: []string{"lpu4", "lpu5", "lpu6", "lpu7"}},
		"one claim twice":      {pod: "pod-1", claims: []string{"uid-a", "uid-a"}, lpus: []string{"lpu4", "lpu5", "lpu6", "lpu7"}},
		"another pod":          {pod: "pod-2", claims: []string{"uid-a"}, want: "claim ns/a (uid-a) was not prepared for pod pod-2", notReserved: true},
		"no pods recorded":     {pod: "pod-1", claims: []string{"uid-b"}, want: "was not prepared for pod pod-1", notReserved: true},
		"unknown claim":        {pod: "pod-1", claims: []string{"uid-a", "uid-x"}, want: "claim uid-x is not prepared by lpu-dra on this node"},
		"empty pod uid":        {pod: "", claims: []string{"uid-a"}, want: "was not prepared for pod", notReserved: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lpus, err := PodLPUs(dir, tc.pod, tc.claims)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(lpus, tc.lpus) {
					t.Fatalf("PodLPUs = %v, want %v", lpus, tc.lpus)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if errors.Is(err, ErrNotReserved) != tc.notReserved {
				t.Fatalf("err = %v: errors.Is(ErrNotReserved) = %v, want %v", err, !tc.notReserved, tc.notReserved)
			}
		})
	}
	if _, err := PodLPUs(t.TempDir(), "pod-1", []string{"uid-a"}); err == nil {
		t.Fatal("verified against an empty state dir")
	}
}

// TestStateChecks: the checkpoint gets the seal key's owner/mode checks.
func TestStateChecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	tests := map[string]struct {
		breakIt func(t *testing.T, dir, path string)
		want    string
		is      error // what the error wraps, when there is a sentinel
	}{
		"file owned by 65534": {breakIt: func(t *testing.T, _, p string) { must(t, os.Chown(p, 65534, -1)) }, want: "owned by uid 65534"},
		"file mode 0644":      {breakIt: func(t *testing.T, _, p string) { must(t, os.Chmod(p, 0o644)) }, want: "mode 0644"},
		"file hard-linked":    {breakIt: func(t *testing.T, _, p string) { must(t, os.Link(p, p+".x")) }, want: "more than one link", is: statedir.ErrLinks},
		"dir owned by 65534":  {breakIt: func(t *testing.T, d, _ string) { must(t, os.Chown(d, 65534, -1)) }, want: "owned by uid 65534"},
		"dir mode 0777":       {breakIt: func(t *testing.T, d, _ string) { must(t, os.Chmod(d, 0o777)) }, want: "lets group/others write"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, Save(dir, sample()))
			path := filepath.Join(dir, FileName)
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("saved checkpoint: %v, %v; want mode 0600", fi, err)
			}
			tc.breakIt(t, dir, path)
			if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Load = %v, want %q (wrapping %v)", err, tc.want, tc.is)
			}
			if _, err := PodLPUs(dir, "pod-1", []string{"uid-a"}); err == nil {
				t.Error("PodLPUs trusted it")
			}
		})
	}
	dir := t.TempDir()
	must(t, os.Chown(dir, 65534, -1))
	if err := Save(dir, sample()); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Save into a dir of uid 65534 = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err == nil {
		t.Error("Save wrote into it")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A clone's claims can change without touching the original's.
func TestClone(t *testing.T) {
	s := sample()
	c := s.Clone()
	if !reflect.DeepEqual(c, s) {
		t.Fatalf("Clone = %+v", c)
	}
	a := c.Claims["uid-a"]
	a.LPUs[0], a.Pods[0] = "lpu9", "pod-9"
	delete(c.Claims, "uid-b")
	if !reflect.DeepEqual(s, sample()) {
		t.Fatalf("changing the clone changed the original: %+v", s)
	}
}
