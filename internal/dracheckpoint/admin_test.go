package dracheckpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A checkpoint written before adminAccess existed loads unchanged: its
// claims are tenants that hold their LPUs.
func TestLoadsCheckpointWithoutAdminAccess(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "before-admin-access.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Claims["0b8c7a1e-6f10-4c3a-9d41-7f0e2a9c5d11"]
	if c.AdminAccess || c.Name != "train" || len(c.Pods) != 1 {
		t.Fatalf("claim = %+v", c)
	}
	if h := s.Held(); !slices.Equal(h, []string{"lpu0", "lpu1", "lpu2", "lpu3"}) {
		t.Fatalf("Held = %v", h)
	}
	// Written back, a tenant claim carries no adminAccess field: the old
	// release reads what the new one writes while no admin claim exists.
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "adminAccess") {
		t.Fatalf("tenant claim written with adminAccess:\n%s", out)
	}
}

// An admin claim on a tenant's LPUs is a valid state; it holds nothing.
func TestAdminClaimHoldsNothing(t *testing.T) {
	s := sample()
	admin := s.Claims["uid-a"]
	admin.UID, admin.Name, admin.AdminAccess, admin.Pods = "uid-admin", "monitor", true, []string{"pod-admin"}
	admin.CDIDevice, admin.SpecName = "lpu.hyperaccel.ai/claim=uid-admin", "lpu.hyperaccel.ai-claim_uid-admin.json"
	s.Claims[admin.UID] = admin
	dir := t.TempDir()
	if err := Save(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Claims["uid-admin"].AdminAccess {
		t.Fatal("adminAccess lost in the round trip")
	}
	if h := got.Held(); !slices.Equal(h, []string{"lpu0", "lpu2", "lpu4", "lpu5", "lpu6", "lpu7"}) {
		t.Fatalf("Held = %v, want only the tenants' LPUs", h)
	}
	if h := got.Holder("lpu5"); h != "uid-a" {
		t.Fatalf("Holder(lpu5) = %q, want the tenant uid-a", h)
	}
	delete(got.Claims, "uid-a")
	if h := got.Holder("lpu5"); h != "" {
		t.Fatalf("Holder(lpu5) = %q with only an admin claim on it", h)
	}
	// lpu-nri serves the admin claim to its pod only.
	if ids, err := PodLPUs(dir, "pod-admin", []string{"uid-admin"}); err != nil || len(ids) != 4 {
		t.Fatalf("PodLPUs(admin pod) = %v, %v", ids, err)
	}
	if _, err := PodLPUs(dir, "pod-1", []string{"uid-admin"}); !errors.Is(err, ErrNotReserved) {
		t.Fatalf("PodLPUs(tenant pod, admin claim) = %v, want ErrNotReserved", err)
	}
}

// A corrupt or newer checkpoint fails Load with one line naming the file
// and the version found.
func TestLoadNamesFileAndVersion(t *testing.T) {
	tests := map[string]struct{ data, version string }{
		"newer release": {`{"version":"lpu.hyperaccel.ai/dra-checkpoint/v2","claims":[],"leases":{}}`, `"lpu.hyperaccel.ai/dra-checkpoint/v2"`},
		"older format":  {`{"version":"v0","claims":[]}`, `"v0"`},
		"truncated":     {`{"version":"` + Version + `","claims":[{"uid":`, "unreadable"},
		"garbage":       {"\x00\x01binary", "unreadable"},
		"no version":    {`{"claims":[]}`, "unreadable"},
		"bad claim":     {`{"version":"` + Version + `","claims":[{"uid":""}]}`, `"` + Version + `"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, "version "+tc.version) || strings.Contains(msg, "\n") {
				t.Fatalf("Load error %q: want one line naming %s and version %s", msg, path, tc.version)
			}
		})
	}
}
