package clustertest

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

// DefaultTimeout bounds the start of each component when Options.Timeout
// is zero. kube-apiserver needs ~10 s on an idle 2-core machine, much more
// when the machine is busy.
const DefaultTimeout = 2 * time.Minute

// Options say what to run and how.
type Options struct {
	// Scheduler also starts kube-scheduler.
	Scheduler bool
	// ControllerManager also starts kube-controller-manager (it creates,
	// among others, the default ServiceAccount a pod needs).
	ControllerManager bool
	// APIServerFlags, SchedulerFlags and ControllerManagerFlags are added
	// after the flags this package sets; a later flag wins.
	APIServerFlags         []string
	SchedulerFlags         []string
	ControllerManagerFlags []string
	// AuthorizationMode is kube-apiserver's --authorization-mode; "Node,RBAC"
	// when empty. (APIServerFlags cannot override it: the flag's values
	// add up.) "RBAC" lets an apiserver run without resource.k8s.io/v1,
	// whose ResourceSlices the Node authorizer's graph watches.
	AuthorizationMode string
	// Dir holds state, certificates, kubeconfigs and logs/; New makes a
	// temporary one when empty and removes it on Stop.
	Dir string
	// Timeout bounds each component's start; DefaultTimeout when zero.
	Timeout time.Duration
	// Binaries are the programs to run; FindBinaries when zero.
	Binaries Binaries
	// Logf, when set, receives a line as each component becomes ready.
	Logf func(format string, args ...any)
}

// Cluster is a running control plane.
type Cluster struct {
	// Config is the admin's client config (group system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same identity,
	// for programs under test and kubectl.
	Kubeconfig string
	// Server is the apiserver's URL, https://127.0.0.1:PORT.
	Server string
	// CAFile is the PEM file of the CA that signed the apiserver's
	// certificate and every client certificate.
	CAFile string
	// Dir is the cluster's directory; logs are in Dir/logs.
	Dir string

	ca      *ca
	procs   []*daemontest.Proc // in start order
	ownDir  bool
	stopped bool
	// opts and schedPort are what RestartScheduler starts the scheduler
	// with again; restarts counts its restarts (the old logs keep them).
	opts      Options
	schedPort int
	restarts  int
}

// Start runs a cluster for the test and stops it when the test ends. When
// the binaries are missing it skips the test, or fails it under CI=true,
// naming the binary and the command that builds it. If the test failed,
// the end of each component's log is logged before the cluster stops.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Binaries == (Binaries{}) {
		b, err := FindBinaries()
		if err != nil {
			msg := fmt.Sprintf("%v (build it with: bash test/e2e/tools.sh kube etcd)", err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		opts.Binaries = b
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("--- end of %s log:\n%s", p.Name, p.Tail(15))
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// New starts a cluster and returns when every component is ready, or an
// error after stopping whatever it had started.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Binaries == (Binaries{}) {
		b, err := FindBinaries()
		if err != nil {
			return nil, err
		}
		opts.Binaries = b
	} else if err := opts.Binaries.check(); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Cluster{Dir: opts.Dir}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "clustertest-")
		if err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
		c.Dir, c.ownDir = dir, true
	}
	if err := c.start(ctx, opts); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// start writes the PKI, then starts etcd, kube-apiserver and, as opts
// asks, the controller-manager and the scheduler, each ready before the
// next.
func (c *Cluster) start(ctx context.Context, opts Options) error {
	pki, logs := filepath.Join(c.Dir, "pki"), filepath.Join(c.Dir, "logs")
	for _, d := range []string{pki, logs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("cluster dir: %w", err)
		}
	}
	ports, err := daemontest.FreePorts(3)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.opts = opts
	c.Server = "https://" + daemontest.Loopback(apiPort)

	if err := c.writePKI(pki); err != nil {
		return err
	}
	etcdURL, err := c.startEtcd(ctx, opts, logs, etcdClient, etcdPeer)
	if err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, opts, pki, logs, etcdURL, apiPort); err != nil {
		return err
	}
	if opts.ControllerManager {
		if _, err := onFreshPort(func(port int) error { return c.startControllerManager(ctx, opts, pki, logs, port) }); err != nil {
			return err
		}
	}
	if opts.Scheduler {
		if c.schedPort, err = onFreshPort(func(port int) error { return c.startScheduler(ctx, opts, logs, port, "/healthz") }); err != nil {
			return err
		}
	}
	return nil
}

// onFreshPort runs start on a port picked just before it, and on a new
// one when another process bound the first in between: the apiserver's
// own client connections draw local ports from the same ephemeral range
// the pick does, so a port picked at the cluster's start can be taken by
// the time a later component binds it. It returns the port start ran on.
func onFreshPort(start func(port int) error) (int, error) {
	var err error
	for range 3 {
		ports, perr := daemontest.FreePorts(1)
		if perr != nil {
			return 0, perr
		}
		if err = start(ports[0]); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return ports[0], err
		}
	}
	return 0, err
}

// startEtcd starts etcd on the two ports and returns its client URL.
func (c *Cluster) startEtcd(ctx context.Context, opts Options, logs string, clientPort, peerPort int) (string, error) {
	// etcd: loopback, plain HTTP, no fsync: state lives only as long as the test.
	etcdURL := "http://" + daemontest.Loopback(clientPort)
	peerURL := "http://" + daemontest.Loopback(peerPort)
	etcdArgs := []string{
		"--name", "clustertest", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "clustertest=" + peerURL,
		"--unsafe-no-fsync", "--log-level", "warn",
	}
	if err := c.launch(ctx, opts, "etcd", opts.Binaries.Etcd, logs, etcdArgs, func(ctx context.Context) error {
		return etcdHealthy(ctx, etcdURL)
	}); err != nil {
		return "", err
	}
	return etcdURL, nil
}

// startAPIServer starts kube-apiserver on apiPort against etcdURL and
// waits until it is ready.
func (c *Cluster) startAPIServer(ctx context.Context, opts Options, pki, logs, etcdURL string, apiPort int) error {
	authz := opts.AuthorizationMode
	if authz == "" {
		authz = "Node,RBAC"
	}
	apiArgs := []string{
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", pki,
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--client-ca-file", c.CAFile,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--authorization-mode", authz,
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		// the only endpoint would be loopback, which the reconciler refuses
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
	}
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return c.launch(ctx, opts, "kube-apiserver", opts.Binaries.KubeAPIServer, logs, append(apiArgs, opts.APIServerFlags...), func(ctx context.Context) error {
		b, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(b) != "ok" {
			return fmt.Errorf("readyz: %q", b)
		}
		return nil
	})
}

// startControllerManager starts kube-controller-manager on cmPort.
func (c *Cluster) startControllerManager(ctx context.Context, opts Options, pki, logs string, cmPort int) error {
	kc, err := c.componentKubeconfig("system:kube-controller-manager")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(cmPort),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file", filepath.Join(pki, "sa.key"),
		"--root-ca-file", c.CAFile,
		"--cluster-signing-cert-file", c.CAFile,
		"--cluster-signing-key-file", filepath.Join(pki, "ca.key"),
		"--profiling=false",
	}
	return c.launch(ctx, opts, "kube-controller-manager", opts.Binaries.KubeControllerManager, logs,
		append(args, opts.ControllerManagerFlags...), func(ctx context.Context) error { return healthz(ctx, cmPort, "/healthz") })
}

// startScheduler starts kube-scheduler on schedPort and waits until
// probe (/healthz or /readyz) answers ok.
func (c *Cluster) startScheduler(ctx context.Context, opts Options, logs string, schedPort int, probe string) error {
	kc, err := c.componentKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(schedPort),
		"--leader-elect=false", "--profiling=false",
	}
	return c.launch(ctx, opts, "kube-scheduler", opts.Binaries.KubeScheduler, logs,
		append(args, opts.SchedulerFlags...), func(ctx context.Context) error { return healthz(ctx, schedPort, probe) })
}

// writePKI makes the CA, the apiserver's serving certificate, the
// service-account key and the admin's kubeconfig.
func (c *Cluster) writePKI(pki string) error {
	var err error
	if c.ca, err = newCA(); err != nil {
		return err
	}
	serving, err := c.ca.sign(pkix.Name{CommonName: "kube-apiserver"}, "127.0.0.1", "localhost", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	saKey, err := newKey()
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	caKeyPEM, err := keyPEM(c.ca.key)
	if err != nil {
		return fmt.Errorf("ca key: %w", err)
	}
	c.CAFile = filepath.Join(pki, "ca.crt")
	if err := writeFiles(pki, map[string][]byte{
		"ca.crt":        c.ca.certPEM,
		"ca.key":        caKeyPEM,
		"apiserver.crt": serving.certPEM,
		"apiserver.key": serving.keyPEM,
		"sa.key":        saKeyPEM,
	}); err != nil {
		return err
	}
	if c.Config, err = c.UserConfig("clustertest-admin", "system:masters"); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, "clustertest-admin", c.Config); err != nil {
		return err
	}
	return nil
}

// launch starts one component, records it for Stop, and waits, bounded by
// opts.Timeout, until ready says it is ready.
func (c *Cluster) launch(ctx context.Context, opts Options, name, bin, logs string, args []string, ready func(context.Context) error) error {
	p, err := daemontest.StartProc(name, bin, logs, nil, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := daemontest.Await(ctx, 200*time.Millisecond, "start "+p.Name, ready, p); err != nil {
		return err
	}
	opts.Logf("clustertest: %s ready after %v (pid %d)", p.Name, time.Since(start).Round(10*time.Millisecond), p.PID())
	return nil
}

// componentKubeconfig writes a kubeconfig for a control-plane identity,
// whose permissions the apiserver's bootstrap RBAC policy grants.
func (c *Cluster) componentKubeconfig(user string) (string, error) {
	cfg, err := c.UserConfig(user)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, filepath.Base(user[len("system:"):])+".kubeconfig")
	return path, writeKubeconfig(path, user, cfg)
}

// UserConfig returns a client config authenticating as user in groups, by
// a client certificate signed by the cluster's CA. What it may do is up to
// RBAC (and admission), as for any user of a real cluster.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	if user == "" {
		return nil, errors.New("user config: empty user name")
	}
	l, err := c.ca.sign(pkix.Name{CommonName: user, Organization: groups})
	if err != nil {
		return nil, err
	}
	return restConfig(c.Server, c.ca.certPEM, l), nil
}

// Stop ends every component by PID, in reverse start order, and removes
// the directory New created (one given in Options.Dir stays). It is safe
// to call more than once.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop()
	}
	if c.ownDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			return fmt.Errorf("remove %s: %w", c.Dir, err)
		}
	}
	return nil
}

// PIDs returns the process ID of each component by name.
func (c *Cluster) PIDs() map[string]int {
	m := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		m[p.Name] = p.PID()
	}
	return m
}

func etcdHealthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil {
		return fmt.Errorf("etcd /health: %w", err)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcd /health: %q", h.Health)
	}
	return nil
}

// insecureLoopback checks the health of components serving a self-signed
// certificate on loopback; it carries no credentials.
var insecureLoopback = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe only
}}

// healthz asks a component serving on port for path (/healthz, /readyz).
func healthz(ctx context.Context, port int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+daemontest.Loopback(port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := insecureLoopback.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %q", path, resp.Status, b)
	}
	return nil
}

// RestartScheduler stops kube-scheduler and starts bin in its place with
// the same flags and port (so a metrics scraper keeps its address), and
// returns when the new one is ready: its informers synced (/readyz), so
// that whatever is measured next does not include the sync. The old log
// is kept as kube-scheduler.N.log. bin empty is the scheduler of Options.
func (c *Cluster) RestartScheduler(ctx context.Context, bin string) error {
	i := slices.IndexFunc(c.procs, func(p *daemontest.Proc) bool { return p.Name == "kube-scheduler" })
	if i < 0 {
		return errors.New("restart kube-scheduler: the cluster runs none (Options.Scheduler)")
	}
	if bin == "" {
		bin = c.opts.Binaries.KubeScheduler
	}
	if err := CheckExecutable(bin); err != nil {
		return fmt.Errorf("restart kube-scheduler: %w", err)
	}
	old := c.procs[i]
	old.Stop()
	c.procs = slices.Delete(c.procs, i, i+1)
	c.restarts++
	if err := os.Rename(old.Log, strings.TrimSuffix(old.Log, ".log")+"."+strconv.Itoa(c.restarts)+".log"); err != nil {
		return fmt.Errorf("restart kube-scheduler: keep its log: %w", err)
	}
	opts := c.opts
	opts.Binaries.KubeScheduler = bin
	return c.startScheduler(ctx, opts, filepath.Dir(old.Log), c.schedPort, "/readyz")
}
