package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// DefaultPluginDir is where runtimes look for pre-installed NRI plugins.
const DefaultPluginDir = "/opt/nri/plugins"

// MaxPodmanCDIVersion is the newest cdiVersion podman 4.3 accepts.
const MaxPodmanCDIVersion = "0.5.0"

// Params say where to look.
type Params struct {
	Root string // discovery root ("/")
	// Discovery are the discoverer's options (backend, topology); none
	// means the lpu layout with default topology.
	Discovery    []device.Option
	StateDir     string // seal key and readiness socket
	Mode         string // "nri" or "cdi"
	NRISocket    string
	PluginName   string        // ours, "lpu"
	PluginIndex  string        // ours, "10"
	PluginDir    string        // pre-installed NRI plugins; default DefaultPluginDir
	CDIDir       string        // CDI spec dir
	KubeletDir   string        // device plugin dir holding kubelet.sock and ours
	ResourceName string        // hyperaccel.ai/lpu
	Timeout      time.Duration // per network check; default 3s
	// DevicePluginHealth is the device plugin's /healthz URL, asked when
	// KubeletDir is not visible (lpu-nri's container in the Helm chart does
	// not mount it; both containers share the pod's loopback). "" skips it.
	DevicePluginHealth string
	// OtherFingerprints are seal key fingerprints of other nodes (their
	// doctor output): a match means the nodes share a key (cloned image).
	OtherFingerprints []string
}

// Result is one check's verdict.
type Result struct {
	Check  string
	OK     bool
	Detail string
}

// Run performs every check.
func Run(ctx context.Context, p Params) []Result {
	if p.PluginDir == "" {
		p.PluginDir = DefaultPluginDir
	}
	if p.Timeout <= 0 {
		p.Timeout = 3 * time.Second
	}
	return []Result{
		checkNRI(ctx, p),
		checkIndex(p),
		checkReadiness(ctx, p),
		checkCDI(ctx, p),
		checkNodes(p),
		checkKey(p),
		checkDevicePlugin(ctx, p),
	}
}

// Print writes one line per result and reports whether any failed.
func Print(w io.Writer, results []Result) (failed bool) {
	for _, r := range results {
		verdict := "OK  "
		if !r.OK {
			verdict, failed = "FAIL", true
		}
		fmt.Fprintf(w, "%s %s: %s\n", verdict, r.Check, r.Detail)
	}
	return failed
}

func ok(check, format string, a ...any) Result {
	return Result{Check: check, OK: true, Detail: fmt.Sprintf(format, a...)}
}

func fail(check, format string, a ...any) Result {
	return Result{Check: check, Detail: fmt.Sprintf(format, a...)}
}

// probe is a throwaway NRI plugin: it registers, waits for Synchronize and
// leaves. It subscribes to RemovePodSandbox only, which changes nothing.
type probe struct{ synced chan struct{} }

func (p *probe) Configure(context.Context, string, string, string) (api.EventMask, error) {
	return api.MustParseEventMask("RemovePodSandbox"), nil
}

func (p *probe) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	select {
	case <-p.synced:
	default:
		close(p.synced)
	}
	return nil, nil
}

func (p *probe) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

func checkNRI(ctx context.Context, p Params) Result {
	const name = "NRI socket"
	if p.Mode == "cdi" {
		return ok(name, "skipped: CDI mode does not use NRI")
	}
	fi, err := os.Stat(p.NRISocket)
	if err != nil {
		return fail(name, "%s: %v (is NRI enabled in the runtime config? containerd 1.7 needs [plugins.\"io.containerd.nri.v1.nri\"] disable = false)", p.NRISocket, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fail(name, "%s is not a socket (%s)", p.NRISocket, fi.Mode())
	}
	pr := &probe{synced: make(chan struct{})}
	probeName := p.PluginName + "-doctor"
	s, err := stub.New(pr, stub.WithPluginName(probeName), stub.WithPluginIdx("99"),
		stub.WithSocketPath(p.NRISocket), stub.WithLogger(quiet{}))
	if err != nil {
		return fail(name, "create probe plugin: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			return fail(name, "%s accepts connections but registration of probe plugin 99-%s failed: %v", p.NRISocket, probeName, err)
		}
	case <-ctx.Done():
		return fail(name, "%s: no answer to plugin registration within %v", p.NRISocket, p.Timeout)
	}
	defer s.Stop()
	select {
	case <-pr.synced:
		return ok(name, "%s accepted and synchronized probe plugin 99-%s (runtime NRI %s)", p.NRISocket, probeName, s.RuntimeNRIVersion())
	case <-ctx.Done():
		return fail(name, "%s registered probe plugin 99-%s but never synchronized it within %v", p.NRISocket, probeName, p.Timeout)
	}
}

func checkIndex(p Params) Result {
	const name = "NRI plugin index"
	if err := api.CheckPluginIndex(p.PluginIndex); err != nil {
		return fail(name, "%v", err)
	}
	entries, err := os.ReadDir(p.PluginDir)
	if errors.Is(err, fs.ErrNotExist) {
		return ok(name, "ours is %s-%s; no pre-installed plugins (%s absent)", p.PluginIndex, p.PluginName, p.PluginDir)
	}
	if err != nil {
		return fail(name, "read %s: %v", p.PluginDir, err)
	}
	var before, after, problems []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || e.IsDir() || info.Mode()&0o111 == 0 {
			continue // the runtime ignores these too
		}
		idx, base, err := api.ParsePluginName(e.Name())
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v (the runtime refuses to start all plugins)", e.Name(), err))
			continue
		}
		switch {
		case base == p.PluginName:
			problems = append(problems, fmt.Sprintf("pre-installed %s has our name: LPUs would be injected by two instances", e.Name()))
		case idx == p.PluginIndex:
			problems = append(problems, fmt.Sprintf("pre-installed %s shares our index %s: their order is undefined", e.Name(), idx))
		case idx < p.PluginIndex:
			before = append(before, e.Name())
		default:
			after = append(after, e.Name())
		}
	}
	if len(problems) > 0 {
		return fail(name, "ours is %s-%s; %s", p.PluginIndex, p.PluginName, strings.Join(problems, "; "))
	}
	return ok(name, "ours is %s-%s; pre-installed in %s: before us %v, after us %v", p.PluginIndex, p.PluginName, p.PluginDir, before, after)
}

func checkReadiness(ctx context.Context, p Params) Result {
	const name = "lpu-nri readiness"
	if p.Mode == "cdi" {
		return ok(name, "skipped: CDI mode (the device plugin does not wait for lpu-nri)")
	}
	path := ready.Path(p.StateDir)
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	if err := ready.Check(ctx, path); err != nil {
		return fail(name, "%v: the device plugin refuses to start LPU containers until lpu-nri runs and is connected", err)
	}
	return ok(name, "%s says lpu-nri is connected to the runtime", path)
}

func checkCDI(ctx context.Context, p Params) Result {
	const name = "CDI spec"
	fi, err := os.Stat(p.CDIDir)
	if err != nil || !fi.IsDir() {
		if p.Mode == "cdi" {
			return fail(name, "spec dir %s: %v", p.CDIDir, errOr(err, "not a directory"))
		}
		return ok(name, "spec dir %s absent; not needed in NRI mode", p.CDIDir)
	}
	file := filepath.Join(p.CDIDir, inject.SpecFileName)
	if _, err := os.Stat(file); err != nil {
		if p.Mode == "cdi" {
			return fail(name, "%s: %v (run lpu-nri --mode cdi or lpu-nri cdi generate)", file, err)
		}
		return ok(name, "no %s; not needed in NRI mode", file)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(p.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return fail(name, "load %s: %v", p.CDIDir, err)
	}
	for path, errs := range cache.GetErrors() {
		if strings.HasPrefix(path, file) {
			return fail(name, "%s is invalid: %v", file, errors.Join(errs...))
		}
	}
	var ours *specs.Spec
	for _, s := range cache.GetVendorSpecs(strings.Split(inject.CDIKind, "/")[0]) {
		if s.GetPath() == file {
			ours = s.Spec
		}
	}
	if ours == nil {
		return fail(name, "%s did not load as a spec of kind %s (shadowed by another spec of our kind?)", file, inject.CDIKind)
	}
	minV, err := specs.MinimumRequiredVersion(ours)
	if err != nil {
		return fail(name, "%s: %v", file, err)
	}
	if ours.Version != minV {
		return fail(name, "%s has cdiVersion %s, but needs only %s: older runtimes (podman 4.3 reads <= %s) may reject it", file, ours.Version, minV, MaxPodmanCDIVersion)
	}
	want, err := discoverIDs(ctx, p)
	if err != nil {
		return fail(name, "%s cdiVersion %s, but cannot compare with the node: %v", file, ours.Version, err)
	}
	var have []string
	for _, d := range ours.Devices {
		if d.Name != inject.CDIAllDevice {
			have = append(have, d.Name)
		}
	}
	slices.Sort(have)
	if !slices.Equal(have, want) {
		return fail(name, "%s lists %v but the node has %v: stale (lpu-nri --mode cdi rewrites it)", file, have, want)
	}
	return ok(name, "%s valid, cdiVersion %s (minimum needed), %d devices + all", file, ours.Version, len(have))
}

func discoverIDs(ctx context.Context, p Params) ([]string, error) {
	inv, err := device.NewSysfs(p.Root, p.Discovery...).Discover(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// checkNodes compares /dev/lpuN with /sys/class/lpu/lpuN under the root;
// with another discovery backend it reports what discovery found wrong
// with each LPU's nodes.
func checkNodes(p Params) Result {
	const name = "device nodes"
	if s := device.NewSysfs(p.Root, p.Discovery...); s.Backend() != device.BackendLPU {
		return checkDiscoveredNodes(s)
	}
	class := filepath.Join(p.Root, device.ClassDir)
	sys, err := lpuEntries(class)
	if err != nil {
		return fail(name, "%s: %v (LPU driver not loaded?)", device.ClassDir, err)
	}
	nodes, err := lpuEntries(filepath.Join(p.Root, device.DevDir))
	if err != nil {
		return fail(name, "%s: %v", device.DevDir, err)
	}
	var problems []string
	standIns := 0
	for _, id := range sortedKeys(sys) {
		e, ok := nodes[id]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s in sysfs has no %s/%s", id, device.DevDir, id))
			continue
		}
		if e.Type()&fs.ModeCharDevice == 0 {
			standIns++
			continue
		}
		if problem := nodeProblem(p.Root, class, id); problem != "" {
			problems = append(problems, problem)
		}
	}
	for _, id := range sortedKeys(nodes) {
		if _, ok := sys[id]; !ok {
			problems = append(problems, fmt.Sprintf("%s/%s has no sysfs entry %s/%s", device.DevDir, id, device.ClassDir, id))
		}
	}
	if len(problems) > 0 {
		return fail(name, "%s", strings.Join(problems, "; "))
	}
	if len(sys) == 0 {
		return fail(name, "no LPUs in %s", device.ClassDir)
	}
	detail := fmt.Sprintf("%d LPUs, every sysfs entry has its node and the other way round", len(sys))
	if standIns > 0 {
		detail += fmt.Sprintf(" (%d nodes are plain files standing in under a marked root)", standIns)
	}
	return ok(name, "%s", detail)
}

// lpuEntries returns the entries of dir named like an LPU (lpuN).
func lpuEntries(dir string) (map[string]fs.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]fs.DirEntry{}
	for _, e := range entries {
		if _, err := device.ParseID(e.Name()); err == nil {
			out[e.Name()] = e
		}
	}
	return out, nil
}

// nodeProblem compares the device number of the character node of id with
// its sysfs dev file; "" when they agree.
func nodeProblem(root, class, id string) string {
	want, err := os.ReadFile(filepath.Join(class, id, "dev"))
	if err != nil {
		return fmt.Sprintf("%s: read dev: %v", id, err)
	}
	ma, mi, err := device.ParseDev(strings.TrimSpace(string(want)))
	if err != nil {
		return fmt.Sprintf("%s: %v", id, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, device.DevDir, id), &st); err != nil {
		return fmt.Sprintf("%s: %v", id, err)
	}
	if gotMa, gotMi := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev)); gotMa != ma || gotMi != mi {
		return fmt.Sprintf("%s/%s is %d:%d but sysfs says %d:%d", device.DevDir, id, gotMa, gotMi, ma, mi)
	}
	return ""
}

// checkDiscoveredNodes is checkNodes for the PCI backends: discovery
// checks every node of every LPU (type and number); its reasons are the
// problems.
func checkDiscoveredNodes(s *device.Sysfs) Result {
	const name = "device nodes"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv, err := s.Discover(ctx)
	if err != nil {
		return fail(name, "%s discovery: %v", s.Backend(), err)
	}
	if len(inv.Devices) == 0 {
		return fail(name, "no LPUs found by the %s backend", s.Backend())
	}
	var problems []string
	nodes := 0
	for _, d := range inv.Devices {
		nodes += len(d.NodeList())
		if !d.Health.Healthy && strings.Contains(d.Health.Reason, "node") {
			problems = append(problems, d.ID+" ("+d.PCIBusID+"): "+d.Health.Reason)
		}
	}
	if len(problems) > 0 {
		return fail(name, "%s", strings.Join(problems, "; "))
	}
	return ok(name, "%d LPUs (%s backend), %d device nodes of the right type and number", len(inv.Devices), s.Backend(), nodes)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := device.ParseID(keys[i])
		b, _ := device.ParseID(keys[j])
		return a < b
	})
	return keys
}

func checkKey(p Params) Result {
	const name = "seal key"
	file := filepath.Join(p.StateDir, inject.KeyFileName)
	if err := inject.CheckStateDir(p.StateDir); err != nil {
		return fail(name, "%v", err)
	}
	fi, err := os.Lstat(file)
	if err != nil {
		return fail(name, "%s: %v (created by the first daemon that starts; is --state-dir the same for both?)", file, err)
	}
	if !fi.Mode().IsRegular() {
		return fail(name, "%s is not a regular file (%s)", file, fi.Mode())
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		return fail(name, "%s has mode %04o, want 0600", file, perm)
	}
	if fi.Size() != inject.KeySize {
		return fail(name, "%s is %d bytes, want %d", file, fi.Size(), inject.KeySize)
	}
	if st, isUnix := fi.Sys().(*syscall.Stat_t); isUnix {
		if uid := os.Geteuid(); int(st.Uid) != uid {
			return fail(name, "%s is owned by uid %d, the daemons run as %d", file, st.Uid, uid)
		}
		if st.Nlink != 1 {
			return fail(name, "%s has %d links, want 1", file, st.Nlink)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fail(name, "%s: %v", file, err)
	}
	k, err := inject.NewKey(b)
	if err != nil {
		return fail(name, "%s: %v", file, err)
	}
	fp := k.Fingerprint()
	for _, other := range p.OtherFingerprints {
		if strings.EqualFold(strings.TrimSpace(other), fp) {
			return fail(name, "%s fingerprint %s matches another node's: the nodes share a seal key (cloned image?); stop both daemons on one node, remove the key there and start them again", file, fp)
		}
	}
	return ok(name, "%s present, mode 0600, %d bytes, fingerprint %s (must differ on every node)", file, fi.Size(), fp)
}

func checkDevicePlugin(ctx context.Context, p Params) Result {
	const name = "device plugin socket"
	if _, err := os.Stat(p.KubeletDir); errors.Is(err, fs.ErrNotExist) {
		if p.DevicePluginHealth == "" {
			return fail(name, "kubelet dir %s is not visible here (not mounted into this container?)", p.KubeletDir)
		}
		return checkDevicePluginHealth(ctx, p)
	}
	file := filepath.Join(p.KubeletDir, device.PluginSocketName(p.ResourceName))
	fi, err := os.Stat(file)
	if err != nil {
		return fail(name, "%s: %v (is lpu-device-plugin running with the same kubelet dir?)", file, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fail(name, "%s is not a socket", file)
	}
	c, err := net.DialTimeout("unix", file, p.Timeout)
	if err != nil {
		return fail(name, "%s exists but nobody answers: %v (stale socket of a stopped lpu-device-plugin?)", file, err)
	}
	c.Close()
	kubelet := filepath.Join(p.KubeletDir, "kubelet.sock")
	if _, err := os.Stat(kubelet); err != nil {
		return fail(name, "%s present, but the kubelet's %s is missing: %v", file, kubelet, err)
	}
	return ok(name, "%s present next to %s", file, kubelet)
}

// checkDevicePluginHealth asks the device plugin itself: its /healthz is 200
// only while it is registered with the kubelet and a ListAndWatch stream is
// open, which is what the socket check infers from the files.
func checkDevicePluginHealth(ctx context.Context, p Params) Result {
	const name = "device plugin socket"
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.DevicePluginHealth, nil)
	if err != nil {
		return fail(name, "device plugin health URL %q: %v", p.DevicePluginHealth, err)
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail(name, "kubelet dir %s not visible here; the device plugin at %s does not answer: %v", p.KubeletDir, p.DevicePluginHealth, err)
	}
	body, _ := io.ReadAll(io.LimitReader(rsp.Body, 512))
	rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		return fail(name, "the device plugin at %s says %d %s: not registered with the kubelet or no ListAndWatch stream", p.DevicePluginHealth, rsp.StatusCode, strings.TrimSpace(string(body)))
	}
	return ok(name, "kubelet dir %s not visible here; the device plugin at %s is registered with the kubelet (ListAndWatch open)", p.KubeletDir, p.DevicePluginHealth)
}

type quiet struct{}

func (quiet) Debugf(context.Context, string, ...any) {}
func (quiet) Infof(context.Context, string, ...any)  {}
func (quiet) Warnf(context.Context, string, ...any)  {}
func (quiet) Errorf(context.Context, string, ...any) {}
