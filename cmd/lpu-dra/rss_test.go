package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// BenchmarkIdleRSS runs the lpu-dra binary, built as each build below, on a
// simulated node of 8 LPUs against a real v1.37.2 API server
// (internal/clustertest; skipped without its binaries) and reports its
// resident memory once it has published its slices and idled for
// idleFor: rss-MiB in total, anon-MiB (heap, stacks) and file-MiB (mapped
// pages of the binary), from /proc/PID/smaps_rollup. Run it with
// -benchtime 1x.
func BenchmarkIdleRSS(b *testing.B) {
	release := []string{"-trimpath", "-tags=grpcnotrace", "-ldflags=-s -w"}
	builds := map[string]struct {
		cgo   bool     // go build's default where a C compiler is installed
		flags []string // go build flags
		env   []string // lpu-dra's environment
	}{
		"plain":                  {cgo: true},      // as test/e2e built it before
		"release":                {flags: release}, // as deploy/container/build-oci.sh and test/e2e build
		"release-memlimit-24MiB": {flags: release, env: []string{"GOMEMLIMIT=24MiB"}},
		"release-gogc-50":        {flags: release, env: []string{"GOGC=50"}},
	}
	c := clustertest.Start(b, clustertest.Options{})
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	bins, dir := map[string]string{}, b.TempDir()
	for _, name := range []string{"plain", "release", "release-memlimit-24MiB", "release-gogc-50"} {
		bld := builds[name]
		b.Run(name, func(b *testing.B) {
			key := fmt.Sprint(bld.cgo, bld.flags)
			bin, ok := bins[key]
			if !ok {
				bin = filepath.Join(dir, fmt.Sprintf("lpu-dra-%d", len(bins)))
				args := append(append([]string{"build", "-o", bin}, bld.flags...), ".")
				cmd := exec.Command("go", args...)
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
				if bld.cgo {
					cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("go %v: %v\n%s", args, err, out)
				}
				bins[key] = bin
			}
			fi, err := os.Stat(bin)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				rss, anon := idleRSS(b, client, c.Kubeconfig, bin, bld.env)
				b.ReportMetric(float64(fi.Size())/(1<<20), "binary-MiB")
				b.ReportMetric(float64(rss)/1024, "rss-MiB")
				b.ReportMetric(float64(anon)/1024, "anon-MiB")
				b.ReportMetric(float64(rss-anon)/1024, "file-MiB")
			}
		})
	}
}

// idleFor is how long lpu-dra idles after publishing before it is measured.
const idleFor = 10 * time.Second

// idleRSS runs bin until its pool is published, idles, and returns its
// Rss and Anonymous in KiB. The slices are deleted afterwards so that the
// next run publishes afresh.
func idleRSS(b *testing.B, client kubernetes.Interface, kubeconfig, bin string, env []string) (rss, anon int64) {
	b.Helper()
	dir := b.TempDir()
	sock := daemontest.ShortDir(b)
	// The kubelet's PodResources socket, serving no pods: lpu-dra keeps LPUs
	// device-plugin pods still hold out of its pool and, without the socket,
	// fails closed and publishes nothing.
	pr := podresourcestest.Start(b, filepath.Join(sock, "pr.sock"))
	// Its own kubelet device-plugin dir: the machine's may have a device
	// plugin of another test serving, which lpu-dra refuses to run beside.
	cfg := filepath.Join(dir, "config.yaml")
	conf := "version: v1\nkubelet:\n  devicePluginDir: " + filepath.Join(dir, "device-plugins") + "\n  podResourcesSocket: " + pr.Socket + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	// the node lpu-nri simulate writes, as the chart's init container does
	root := filepath.Join(dir, "state", "simulated-node")
	if err := devicesim.WriteNode(root, 8, ""); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "--root", root, "--node-name", "n1", "--kubeconfig", kubeconfig,
		"--state-dir", filepath.Join(dir, "state"), "--cdi-dir", filepath.Join(dir, "cdi"),
		"--plugin-dir", filepath.Join(sock, "p"), "--registry-dir", filepath.Join(sock, "r"),
		"--metrics-addr", daemontest.FreeAddr(b))
	cmd.Env = append(os.Environ(), env...)
	log, err := os.Create(filepath.Join(dir, "lpu-dra.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if err := <-exited; err == nil {
			b.Log("lpu-dra exited cleanly before it was killed")
		}
		_ = client.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	}()
	deadline := time.Now().Add(time.Minute)
	const want = 57 + 8 // every arc of a ring of 8, and one count device per LPU
	for devices := 0; devices != want; {
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			b.Fatalf("lpu-dra published %d of %d devices within a minute:\n%s", devices, want, out)
		}
		select {
		case err := <-exited:
			exited <- err
			out, _ := os.ReadFile(log.Name())
			b.Fatalf("lpu-dra exited (%v):\n%s", err, out)
		case <-time.After(100 * time.Millisecond):
		}
		list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		devices = 0
		for _, s := range list.Items {
			if s.Spec.Driver == inject.Driver && s.Spec.Pool.Name == "n1" {
				devices += len(s.Spec.Devices)
			}
		}
	}
	time.Sleep(idleFor)
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "Rss":
			rss = n
		case "Anonymous":
			anon = n
		}
	}
	if rss == 0 {
		b.Fatal("no Rss in smaps_rollup")
	}
	logMappings(b, cmd.Process.Pid)
	return rss, anon
}

// logMappings logs the resident KiB of the mappings of at least 512 KiB
// (the binary's text, rodata, data; the Go heap arena), from
// /proc/PID/smaps.
func logMappings(b *testing.B, pid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	var lines []string
	name := ""
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name = f[0] + " " + f[1]
			if len(f) >= 6 {
				name += " " + filepath.Base(f[5])
			}
		case len(f) == 3 && f[0] == "Rss:":
			if kb, _ := strconv.Atoi(f[1]); kb < 512 {
				continue
			}
			lines = append(lines, name+" "+f[1]+" kB")
		}
	}
	b.Logf("resident mappings of lpu-dra:\n%s", strings.Join(lines, "\n"))
}
