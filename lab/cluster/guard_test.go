package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCheckMemoryRefusesWhatDoesNotFit(t *testing.T) {
	have, err := availableMiB()
	if err != nil {
		t.Skip(err)
	}
	nodes := int(float64(have)/perNodeMiB) + 1
	_, err = checkMemory(nodes, 0)
	if err == nil || !strings.Contains(err.Error(), "memory estimate") || !strings.Contains(err.Error(), "cannot hold") {
		t.Fatalf("%d nodes on %d MiB: %v, want a refusal with the estimate", nodes, have, err)
	}
	if _, err := checkMemory(10, 100); err != nil {
		t.Fatalf("10 nodes: %v", err)
	}
}

func TestCleanupStale(t *testing.T) {
	t.Setenv("LPU_CLUSTER_STATE", filepath.Join(t.TempDir(), "state.json"))
	// A killed run: its harness and a "component" (sleep) whose PID and
	// binary were recorded, and its directory.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	comp := exec.Command(sleep, "60")
	if err := comp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = comp.Process.Kill() }()
	exited := make(chan error, 1)
	go func() { exited <- comp.Wait() }()
	dead := exec.Command(sleep, "0")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(t.TempDir(), "lpu-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(comp.Process.Pid) + "/exe")
	st := &state{Harness: dead.Process.Pid, Dir: dir, PIDs: map[string]int{"etcd": comp.Process.Pid}, Exes: map[string]string{"etcd": exe}}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	var log []string
	if err := cleanupStale(func(f string, a ...any) { log = append(log, f) }); err != nil {
		t.Fatal(err)
	}
	select {
	case werr := <-exited:
		t.Logf("the component ended: %v", werr)
	case <-time.After(5 * time.Second):
		t.Fatal("the recorded component was not killed")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir %s left: %v", dir, err)
	}
	if _, err := os.Stat(stateFile()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file left: %v", err)
	}

	// A run still alive (this test's parent) is refused, and left alone.
	st = &state{Harness: os.Getppid(), Dir: dir}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	if err := cleanupStale(func(string, ...any) {}); err == nil || !strings.Contains(err.Error(), "another cluster run") {
		t.Fatalf("live run: %v", err)
	}
}

func TestRefusedPrintsObjectAndReason(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name", Namespace: namespace}}
	err := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "Bad_Name",
		field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), "Bad_Name", "a lowercase RFC 1123 subdomain")})
	got := refused("pod Bad_Name", p, err).Error()
	for _, want := range []string{"refused pod Bad_Name", "metadata.name", "Invalid", "code 422", "name: Bad_Name"} {
		if !strings.Contains(got, want) {
			t.Errorf("error lacks %q:\n%s", want, got)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no nodes":    {[]string{"-nodes", "0"}, "-nodes 0"},
		"two-ring":    {[]string{"-nodes", "4", "-two-ring", "5"}, "-two-ring 5"},
		"unknown arm": {[]string{"-arms", "dra-magic"}, `unknown arm "dra-magic"`},
		"short unit":  {[]string{"-unit", "100ms"}, "-unit 100ms"},
		"bad load":    {[]string{"-load", "0"}, "-load 0"},
		"pods":        {[]string{"-pods", "0"}, "-pods 0"},
		"coalesce":    {[]string{"-coalesce", "-1s"}, "-coalesce -1s"},
		"prefilter on a static arm": {[]string{"-arms", "dra-static-prefilter"},
			`arm "dra-static-prefilter": -prefilter needs a DRA arm that republishes, dra-static does not`},
		"prefilter on the device plugin": {[]string{"-arms", "dp-least-prefilter"}, `dp-least does not`},
		"suffixes swapped":               {[]string{"-arms", "dra-dynamic-proto-prefilter", "-proto-scheduler", "/bin/true"}, `unknown arm "dra-dynamic-proto-prefilter"`},
		"proto without its scheduler":    {[]string{"-arms", "dra-dynamic,dra-dynamic-proto"}, "needs -proto-scheduler PATH"},
		"proto scheduler without arm":    {[]string{"-arms", "dra-dynamic", "-proto-scheduler", "/bin/true"}, "-proto-scheduler /bin/true: no arm ending in -proto"},
		"arm twice":                      {[]string{"-arms", "all,dra-dynamic"}, `arm "dra-dynamic" named twice`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
	c, err := parseFlags([]string{"-nodes", "20", "-arms", "dra-dynamic,dp-least"})
	if err != nil || len(c.Arms) != 2 || c.Burst != 30 {
		t.Fatalf("good flags: %+v %v", c, err)
	}
}
