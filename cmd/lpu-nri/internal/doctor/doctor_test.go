package doctor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/cdimode"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// node is a healthy fake node: device tree, state dir with key and a
// connected readiness socket, CDI spec, kubelet and device plugin sockets,
// a pre-installed plugin and a real NRI runtime side.
type node struct {
	p     Params
	rt    *nritest.Runtime
	ready *ready.Server
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := devicetest.NewTree(t, devicetest.Row{Index: 0}, devicetest.Row{Index: 1}, devicetest.Row{Index: 2})
	rt := nritest.New(t) // short dir for every socket
	rt.Start(t)
	base := rt.Dir
	n := &node{rt: rt, p: Params{
		Root:         root,
		StateDir:     filepath.Join(base, "state"),
		Mode:         "nri",
		NRISocket:    rt.Socket,
		PluginName:   "lpu",
		PluginIndex:  "10",
		PluginDir:    rt.PluginDir,
		CDIDir:       filepath.Join(base, "cdi"),
		KubeletDir:   filepath.Join(base, "kubelet"),
		ResourceName: "hyperaccel.ai/lpu",
		Timeout:      2 * time.Second,
	}}
	if _, err := inject.LoadOrCreateKey(n.p.StateDir); err != nil {
		t.Fatal(err)
	}
	rs, err := ready.Listen(ready.Path(n.p.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	rs.Set(true)
	n.ready = rs
	s := &cdimode.Syncer{Discoverer: device.NewSysfs(root), Dir: n.p.CDIDir,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubelet.sock", "lpu.sock"} {
		listen(t, filepath.Join(n.p.KubeletDir, name))
	}
	writeExe(t, filepath.Join(n.p.PluginDir, "05-topology"))
	writeExe(t, filepath.Join(n.p.PluginDir, "90-logger"))
	return n
}

func listen(t *testing.T, path string) net.Listener {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

func writeExe(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func results(t *testing.T, p Params) (map[string]Result, string) {
	t.Helper()
	rs := Run(context.Background(), p)
	var out bytes.Buffer
	Print(&out, rs)
	m := map[string]Result{}
	for _, r := range rs {
		m[r.Check] = r
	}
	return m, out.String()
}

func TestHealthyNode(t *testing.T) {
	n := newNode(t)
	rs := Run(context.Background(), n.p)
	var out bytes.Buffer
	failed := Print(&out, rs)
	t.Log("\n" + out.String())
	if failed {
		t.Fatalf("healthy node failed:\n%s", out.String())
	}
	if len(rs) != 7 {
		t.Fatalf("%d checks, want 7:\n%s", len(rs), out.String())
	}
	for _, want := range []string{
		"accepted and synchronized probe plugin 99-lpu-doctor",
		"before us [05-topology], after us [90-logger]",
		"cdiVersion 0.",
		"3 LPUs",
		"mode 0600",
		"fingerprint ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// The probe was accepted and synchronized (the report says so); now
	// it must leave again, leaving the runtime without plugins. Wait
	// for that event rather than sleeping: a slow runner neither fails
	// early nor passes before the probe could have left.
	n.rt.WaitPlugins(t, 0)
}

func TestFailures(t *testing.T) {
	tests := map[string]struct {
		breakIt func(t *testing.T, n *node)
		check   string
		says    string
	}{
		"runtime down": {
			breakIt: func(_ *testing.T, n *node) { n.rt.Stop() },
			check:   "NRI socket", says: "no such file",
		},
		"socket path is a plain file": {
			breakIt: func(t *testing.T, n *node) {
				n.rt.Stop()
				if err := os.WriteFile(n.p.NRISocket, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			check: "NRI socket", says: "not a socket",
		},
		"index shared with a pre-installed plugin": {
			breakIt: func(t *testing.T, n *node) { writeExe(t, filepath.Join(n.p.PluginDir, "10-other")) },
			check:   "NRI plugin index", says: "shares our index 10",
		},
		"our name pre-installed": {
			breakIt: func(t *testing.T, n *node) { writeExe(t, filepath.Join(n.p.PluginDir, "20-lpu")) },
			check:   "NRI plugin index", says: "has our name",
		},
		"bad plugin file name": {
			breakIt: func(t *testing.T, n *node) { writeExe(t, filepath.Join(n.p.PluginDir, "lpu")) },
			check:   "NRI plugin index", says: "idx-pluginname expected",
		},
		"lpu-nri not connected": {
			breakIt: func(_ *testing.T, n *node) { n.ready.Set(false) },
			check:   "lpu-nri readiness", says: "not connected",
		},
		"spec invalid": {
			breakIt: func(t *testing.T, n *node) {
				if err := os.WriteFile(filepath.Join(n.p.CDIDir, inject.SpecFileName),
					[]byte(`{"cdiVersion":"0.5.0","kind":"hyperaccel.ai/lpu","devices":[{"name":"lpu0"}]}`), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			check: "CDI spec", says: "invalid",
		},
		"spec version higher than needed": {
			breakIt: func(t *testing.T, n *node) {
				if err := os.WriteFile(filepath.Join(n.p.CDIDir, inject.SpecFileName),
					[]byte(`{"cdiVersion":"0.8.0","kind":"hyperaccel.ai/lpu","devices":[{"name":"lpu0","containerEdits":{"deviceNodes":[{"path":"/dev/lpu0"}]}}]}`), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			check: "CDI spec", says: "needs only",
		},
		"spec stale": {
			breakIt: func(t *testing.T, n *node) { devicetest.AddDevice(t, n.p.Root, devicetest.Row{Index: 3}) },
			check:   "CDI spec", says: "stale",
		},
		"spec missing in CDI mode": {
			breakIt: func(t *testing.T, n *node) {
				n.p.Mode = "cdi"
				os.Remove(filepath.Join(n.p.CDIDir, inject.SpecFileName))
			},
			check: "CDI spec", says: "lpu-nri cdi generate",
		},
		"node missing": {
			breakIt: func(t *testing.T, n *node) { devicetest.RemoveNode(t, n.p.Root, "lpu1") },
			check:   "device nodes", says: "lpu1 in sysfs has no /dev/lpu1",
		},
		"node without sysfs entry": {
			breakIt: func(t *testing.T, n *node) { devicetest.CreateNode(t, n.p.Root, "lpu7") },
			check:   "device nodes", says: "/dev/lpu7 has no sysfs entry",
		},
		"driver not loaded": {
			breakIt: func(t *testing.T, n *node) { os.RemoveAll(filepath.Join(n.p.Root, "sys")) },
			check:   "device nodes", says: "driver not loaded",
		},
		"seal key readable by others": {
			breakIt: func(t *testing.T, n *node) {
				if err := os.Chmod(filepath.Join(n.p.StateDir, inject.KeyFileName), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			check: "seal key", says: "mode 0644, want 0600",
		},
		"seal key shared with another node": {
			breakIt: func(t *testing.T, n *node) {
				b, err := os.ReadFile(filepath.Join(n.p.StateDir, inject.KeyFileName))
				if err != nil {
					t.Fatal(err)
				}
				k, err := inject.NewKey(b)
				if err != nil {
					t.Fatal(err)
				}
				n.p.OtherFingerprints = []string{"0000000000000000", strings.ToUpper(k.Fingerprint())}
			},
			check: "seal key", says: "matches another node's",
		},
		"seal key with a second link": {
			breakIt: func(t *testing.T, n *node) {
				p := filepath.Join(n.p.StateDir, inject.KeyFileName)
				if err := os.Link(p, p+".copy"); err != nil {
					t.Fatal(err)
				}
			},
			check: "seal key", says: "has 2 links, want 1",
		},
		"state dir writable by others": {
			breakIt: func(t *testing.T, n *node) {
				if err := os.Chmod(n.p.StateDir, 0o777); err != nil {
					t.Fatal(err)
				}
			},
			check: "seal key", says: "lets group/others write",
		},
		"seal key missing": {
			breakIt: func(t *testing.T, n *node) { os.Remove(filepath.Join(n.p.StateDir, inject.KeyFileName)) },
			check:   "seal key", says: "no such file",
		},
		"device plugin not running": {
			breakIt: func(t *testing.T, n *node) { os.Remove(filepath.Join(n.p.KubeletDir, "lpu.sock")) },
			check:   "device plugin socket", says: "is lpu-device-plugin running",
		},
		"device plugin socket stale": {
			breakIt: func(t *testing.T, n *node) {
				path := filepath.Join(n.p.KubeletDir, "lpu.sock")
				os.Remove(path)
				ln, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				ln.(*net.UnixListener).SetUnlinkOnClose(false)
				ln.Close()
			},
			check: "device plugin socket", says: "nobody answers",
		},
		"kubelet dir not mounted, no health URL": {
			breakIt: func(t *testing.T, n *node) { n.p.KubeletDir = filepath.Join(t.TempDir(), "absent") },
			check:   "device plugin socket", says: "not visible here",
		},
		"kubelet dir not mounted, device plugin unhealthy": {
			breakIt: func(t *testing.T, n *node) {
				n.p.KubeletDir = filepath.Join(t.TempDir(), "absent")
				n.p.DevicePluginHealth = healthServer(t, http.StatusServiceUnavailable).URL + "/healthz"
			},
			check: "device plugin socket", says: "says 503",
		},
		"kubelet dir not mounted, device plugin down": {
			breakIt: func(t *testing.T, n *node) {
				n.p.KubeletDir = filepath.Join(t.TempDir(), "absent")
				srv := healthServer(t, http.StatusOK)
				n.p.DevicePluginHealth = srv.URL + "/healthz"
				srv.Close()
			},
			check: "device plugin socket", says: "does not answer",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			tc.breakIt(t, n)
			m, out := results(t, n.p)
			r, ok := m[tc.check]
			if !ok {
				t.Fatalf("no check %q:\n%s", tc.check, out)
			}
			if r.OK || !strings.Contains(r.Detail, tc.says) {
				t.Fatalf("check %q = %+v, want FAIL saying %q\n%s", tc.check, r, tc.says, out)
			}
			if !strings.Contains(out, "FAIL "+tc.check+": ") {
				t.Fatalf("report does not show the failure:\n%s", out)
			}
		})
	}
}

// healthServer serves /healthz with code on loopback, as the device plugin
// does on its metrics port in the same pod.
func healthServer(t *testing.T, code int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		fmt.Fprintln(w, http.StatusText(code))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestDevicePluginHealthFallback: from lpu-nri's container in the chart the
// kubelet dir is not mounted; the device plugin's own /healthz answers for it.
func TestDevicePluginHealthFallback(t *testing.T) {
	n := newNode(t)
	n.p.KubeletDir = filepath.Join(t.TempDir(), "absent")
	n.p.DevicePluginHealth = healthServer(t, http.StatusOK).URL + "/healthz"
	m, out := results(t, n.p)
	if r := m["device plugin socket"]; !r.OK || !strings.Contains(r.Detail, "registered with the kubelet") {
		t.Fatalf("device plugin check = %+v\n%s", r, out)
	}
}

// TestCheckNodesOrion: with the xilinx backend the node check is what
// discovery finds wrong with each card's nodes.
func TestCheckNodesOrion(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	p := Params{Root: root, Discovery: []device.Option{
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}),
		device.WithLogger(slog.New(slog.DiscardHandler)),
	}}
	if r := checkNodes(p); !r.OK || !strings.Contains(r.Detail, "4 LPUs (xilinx backend), 8 device nodes") {
		t.Fatalf("healthy Orion node: %+v", r)
	}
	if err := os.Remove(filepath.Join(root, "/dev/xclmgmt12544")); err != nil {
		t.Fatal(err)
	}
	if r := checkNodes(p); r.OK || !strings.Contains(r.Detail, "lpu2 (0000:31:00.1): device node /dev/xclmgmt12544 missing") {
		t.Fatalf("missing management node: %+v", r)
	}
}
