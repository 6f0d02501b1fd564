package ledger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestStoppedSandboxes: the stops seen are on disk once the ledger is
// closed (only those of pods holding IDs), a reopened ledger takes a
// listed sandbox as stopped by them unless it runs a container, and
// stops of sandboxes no longer listed are forgotten.
func TestStoppedSandboxes(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	must(t, err)
	for i, h := range []Holder{{Pod: "job", Sandbox: "s-job"}, {Pod: "odd", Sandbox: "s-odd"}, {Pod: "web", Sandbox: "s-web"}} {
		must(t, l.Claim(id("x", i), h))
	}
	l.Stopped("job", "s-job")
	l.Stopped("odd", "s-odd")       // stopped, yet listed with a running container below
	l.Stopped("no-ids", "s-no-ids") // holds no ID: nothing to keep
	if l.isLive("job") || !l.isLive("web") {
		t.Fatalf("after the stop: job live %v, web live %v", l.isLive("job"), l.isLive("web"))
	}
	must(t, l.Close())
	if got := stopsOnDisk(t, dir); !slices.Equal(got, []string{"s-job", "s-odd"}) {
		t.Fatalf("%s holds %v, want [s-job s-odd]", StoppedName, got)
	}

	re, err := Open(dir) // lpu-nri restarted
	must(t, err)
	listed := []Sandbox{{ID: "s-job", Pod: "job"}, {ID: "s-odd", Pod: "odd", Active: true}, {ID: "s-web", Pod: "web"}}
	must(t, re.Prune(listed))
	for pod, want := range map[string]bool{"job": false, "odd": true, "web": true} {
		if got := re.isLive(pod); got != want {
			t.Errorf("after a restart and Synchronize: %s live %v, want %v", pod, got, want)
		}
	}
	if e := re.entries[id("x", 0)]; !re.evictable(e) {
		t.Error("the stopped pod's ID is not evictable")
	}
	must(t, re.Prune(listed[2:])) // the job and odd pods were deleted meanwhile
	must(t, re.Close())
	if got := stopsOnDisk(t, dir); len(got) != 0 {
		t.Errorf("stops of sandboxes no longer listed kept: %v", got)
	}
}

// TestOldSandboxKeepsPod: the kubelet made the pod a new sandbox (the old
// one died); the old one's stop and its removal (kubelet's garbage
// collection) leave the pod live while the new one runs.
func TestOldSandboxKeepsPod(t *testing.T) {
	l, err := Open(t.TempDir())
	must(t, err)
	defer l.Close()
	must(t, l.Claim(idA, Holder{Pod: "p", Sandbox: "old"}))
	l.Stopped("p", "old")
	must(t, l.Claim(idA, Holder{Pod: "p", Sandbox: "new"})) // its container again, in the new sandbox
	l.Removed("p", "old")
	if !l.isLive("p") || l.evictable(l.entries[idA]) {
		t.Fatal("the old sandbox's removal made the pod's ID evictable while its new sandbox runs")
	}
	l.Stopped("p", "new")
	if l.isLive("p") || !l.evictable(l.entries[idA]) {
		t.Error("the pod's last sandbox stopped, its ID is not evictable")
	}
}

// stopsOnDisk returns the sandbox IDs StoppedName holds, sorted.
func stopsOnDisk(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, StoppedName))
	must(t, err)
	var fl stoppedFile
	must(t, json.Unmarshal(data, &fl))
	var out []string
	for sb := range fl.Stopped {
		out = append(out, sb)
	}
	slices.Sort(out)
	return out
}
