package dracheckpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// testdata/v1-checkpoint.json is a checkpoint as the released lpu-dra
// writes it (format v1). An upgraded driver must load it as it is: the
// claims it names stay prepared across the upgrade. Do not regenerate it
// when the format changes; add a file for the new format instead.
const compatFile = "testdata/v1-checkpoint.json"

func TestLoadPreviousRelease(t *testing.T) {
	data, err := os.ReadFile(compatFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatalf("the previous release's checkpoint does not load: %v", err)
	}
	want := map[string]Claim{
		"0b7f3c1e-5a2d-4f8e-9c61-2d4a8e0f1b37": {UID: "0b7f3c1e-5a2d-4f8e-9c61-2d4a8e0f1b37", Namespace: "ml", Name: "train-0-lpus-x7k2p",
			Devices: []Device{{Request: "lpus", Pool: "node-a", Device: "ring0-start0-size4"}},
			LPUs:    []string{"lpu0", "lpu1", "lpu2", "lpu3"}, CDIDevice: "lpu.hyperaccel.ai/claim=0b7f3c1e-5a2d-4f8e-9c61-2d4a8e0f1b37",
			SpecName: "lpu.hyperaccel.ai-claim_0b7f3c1e-5a2d-4f8e-9c61-2d4a8e0f1b37.json", Pods: []string{"5d2c9a40-1e7b-4c3f-8a96-0f4e2b7d1c58"}},
		"9e41d2b8-3c6a-4b0f-a7e5-6f1c0d9b2a84": {UID: "9e41d2b8-3c6a-4b0f-a7e5-6f1c0d9b2a84", Namespace: "default", Name: "shared",
			Devices: []Device{{Request: "lpus/singles", Pool: "node-a", Device: "ring0-start5-size1"}, {Request: "lpus/singles", Pool: "node-a", Device: "ring0-start7-size1"}},
			LPUs:    []string{"lpu5", "lpu7"}, CDIDevice: "lpu.hyperaccel.ai/claim=9e41d2b8-3c6a-4b0f-a7e5-6f1c0d9b2a84",
			SpecName: "lpu.hyperaccel.ai-claim_9e41d2b8-3c6a-4b0f-a7e5-6f1c0d9b2a84.json",
			Pods:     []string{"2a8f6e13-9b4d-4e21-b0c7-7d3e5f9a6b02", "c4b1e7f9-0d3a-4a6c-9e58-1b2f8d4c7e60"}},
		"f3a05c6d-8e2b-4d71-9b4a-c0e7f1d2a395": {UID: "f3a05c6d-8e2b-4d71-9b4a-c0e7f1d2a395", Namespace: "default", Name: "prepared-before-pods",
			Devices: []Device{{Request: "lpu", Pool: "node-a", Device: "ring0-start4-size1"}},
			LPUs:    []string{"lpu4"}, CDIDevice: "lpu.hyperaccel.ai/claim=f3a05c6d-8e2b-4d71-9b4a-c0e7f1d2a395",
			SpecName: "lpu.hyperaccel.ai-claim_f3a05c6d-8e2b-4d71-9b4a-c0e7f1d2a395.json"},
	}
	if !reflect.DeepEqual(got.Claims, want) {
		t.Fatalf("loaded %+v\nwant %+v", got.Claims, want)
	}
	// lpu-nri's check reads the same file: the pods recorded by the old
	// release still pass, others do not.
	if ids, err := PodLPUs(dir, "c4b1e7f9-0d3a-4a6c-9e58-1b2f8d4c7e60", []string{"9e41d2b8-3c6a-4b0f-a7e5-6f1c0d9b2a84"}); err != nil ||
		!reflect.DeepEqual(ids, []string{"lpu5", "lpu7"}) {
		t.Fatalf("PodLPUs of a recorded pod = %v, %v", ids, err)
	}
	if _, err := PodLPUs(dir, "another-pod", []string{"0b7f3c1e-5a2d-4f8e-9c61-2d4a8e0f1b37"}); err == nil {
		t.Fatal("PodLPUs accepted a pod the old release did not record")
	}
	// Saving what was loaded writes the same bytes: the new release keeps
	// the format, so a downgrade reads its checkpoint too.
	if err := Save(dir, got); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(again), bytes.TrimSpace(data)) {
		t.Fatalf("re-saved checkpoint differs from the previous release's:\n%s", again)
	}
}
