package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDefaults(t *testing.T) {
	tests := map[string]string{
		"empty path":   "",
		"version only": "version: v1\n",
		"nulls":        "version: v1\nhealth:\ntopology: null\n",
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			path := ""
			if name != "empty path" {
				path = writeFile(t, content)
			}
			got, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, Default()) {
				t.Errorf("Load(%q) = %+v, want Default() %+v", content, got, Default())
			}
		})
	}
}

func TestDefaultValues(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	checks := map[string]struct{ got, want any }{
		"resourceName":        {c.ResourceName, "hyperaccel.ai/lpu"},
		"root":                {c.Root, "/"},
		"stateDir":            {c.StateDir, "/var/lib/lpu"},
		"topology.source":     {c.Topology.Source, "auto"},
		"allocation.policy":   {c.Allocation.Policy, "best-effort"},
		"injection.mode":      {c.Injection.Mode, "auto"},
		"injection.mounts":    {c.Injection.Mounts, []Mount{{HostPath: "/usr/lib/lpu", ContainerPath: "/usr/lib/lpu"}}},
		"resyncInterval":      {c.Health.ResyncInterval.Duration, 5 * time.Second},
		"failureThreshold":    {c.Health.FailureThreshold, 2},
		"recoveryThreshold":   {c.Health.RecoveryThreshold, 2},
		"probeInterval":       {c.Health.ProbeInterval.Duration, 100 * time.Millisecond},
		"pollInterval":        {c.Health.PollInterval.Duration, 500 * time.Millisecond},
		"podResourcesTimeout": {c.Kubelet.PodResourcesTimeout.Duration, 500 * time.Millisecond},
		"kubelet.rootDir":     {c.Kubelet.RootDir, "/var/lib/kubelet"},
		"devicePluginDir":     {c.Kubelet.DevicePluginDir, "/var/lib/kubelet/device-plugins"},
		"podResourcesSocket":  {c.Kubelet.PodResourcesSocket, "/var/lib/kubelet/pod-resources/kubelet.sock"},
		"registryDir":         {c.Kubelet.RegistryDir(), "/var/lib/kubelet/plugins_registry"},
		"draPluginDir":        {c.Kubelet.DRAPluginDir(), "/var/lib/kubelet/plugins/lpu.hyperaccel.ai"},
		"nri.socket":          {c.NRI.Socket, "/var/run/nri/nri.sock"},
		"nri.pluginIndex":     {c.NRI.PluginIndex, "10"},
		"nri.pluginName":      {c.NRI.PluginName, "lpu"},
		"cdi.specDir":         {c.CDI.SpecDir, "/var/run/cdi"},
		"metrics.address":     {c.Metrics.Address, ""},
		"tracing.endpoint":    {c.Tracing.Endpoint, ""},
		"tracing.insecure":    {c.Tracing.Insecure, false},
		"log.level":           {c.Log.Level, "info"},
		"log.format":          {c.Log.Format, "json"},
	}
	for name, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

func TestLoadValues(t *testing.T) {
	got, err := Load(writeFile(t, `
version: v1
allocation: {policy: strict}
injection:
  mode: cdi
  mounts:
    - hostPath: /opt/lpu/bin
      containerPath: /usr/local/lpu/bin
    - hostPath: /usr/lib/lpu
  env: {LPU_LOG: debug}
topology:
  source: config
  rings: [[lpu0, lpu1], [lpu2, lpu3]]
health: {resyncInterval: 1m30s}
metrics: {address: ":9400"}
tracing: {endpoint: "otel-collector.observability:4317", insecure: true}
`))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.Allocation.Policy != PolicyStrict || got.Injection.Mode != InjectionCDI {
		t.Errorf("policy/mode = %q/%q", got.Allocation.Policy, got.Injection.Mode)
	}
	wantMounts := []Mount{{"/opt/lpu/bin", "/usr/local/lpu/bin"}, {"/usr/lib/lpu", "/usr/lib/lpu"}}
	if !reflect.DeepEqual(got.Injection.Mounts, wantMounts) {
		t.Errorf("mounts = %v, want %v", got.Injection.Mounts, wantMounts)
	}
	if got.Health.ResyncInterval.Duration != 90*time.Second || got.Health.ProbeInterval.Duration != DefaultProbeInterval {
		t.Errorf("health = %+v", got.Health)
	}
	if !reflect.DeepEqual(got.Topology.Rings, [][]string{{"lpu0", "lpu1"}, {"lpu2", "lpu3"}}) {
		t.Errorf("rings = %v", got.Topology.Rings)
	}
	if got.Injection.Env["LPU_LOG"] != "debug" || got.Metrics.Address != ":9400" {
		t.Errorf("env/metrics = %v %q", got.Injection.Env, got.Metrics.Address)
	}
	if got.Tracing != (Tracing{Endpoint: "otel-collector.observability:4317", Insecure: true}) {
		t.Errorf("tracing = %+v", got.Tracing)
	}
}

func TestLoadEmptyMountsMeansNone(t *testing.T) {
	got, err := Load(writeFile(t, "version: v1\ninjection: {mounts: []}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Injection.Mounts == nil || len(got.Injection.Mounts) != 0 {
		t.Errorf("mounts = %#v, want empty (not default)", got.Injection.Mounts)
	}
}

// TestLoadErrors: each bad file fails with errors naming the field path,
// the value and (for enums) the allowed values.
func TestLoadErrors(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want []string // substrings of the error
	}{
		"no version":          {"resourceName: a.b/c\n", []string{`version: "" not supported (allowed: v1)`}},
		"empty file":          {"", []string{"version: missing (allowed: v1)"}},
		"wrong version":       {"version: v2\n", []string{`version: "v2" not supported (allowed: v1)`}},
		"not a mapping":       {"- a\n", []string{"top level: want a mapping"}},
		"unknown top field":   {"version: v1\nresouceName: x\n", []string{"resouceName: unknown field (allowed: allocation,"}},
		"unknown nested":      {"version: v1\nallocation: {polcy: strict}\n", []string{"allocation.polcy: unknown field (allowed: policy)"}},
		"unknown in mount":    {"version: v1\ninjection: {mounts: [{hostPath: /a, readOnly: true}]}\n", []string{"injection.mounts[0].readOnly: unknown field"}},
		"duplicate key":       {"version: v1\nroot: /\nroot: /x\n", []string{"parse yaml", "root"}},
		"bad yaml":            {"version: [v1\n", []string{"parse yaml"}},
		"policy":              {"version: v1\nallocation: {policy: fast}\n", []string{`allocation.policy: "fast" is not allowed (allowed: best-effort, strict)`}},
		"mode":                {"version: v1\ninjection: {mode: docker}\n", []string{`injection.mode: "docker" is not allowed (allowed: auto, nri, cdi)`}},
		"source":              {"version: v1\ntopology: {source: magic}\n", []string{`topology.source: "magic" is not allowed (allowed: auto, config, table, sysfs, index)`}},
		"plugin index":        {"version: v1\nnri: {pluginIndex: \"7\"}\n", []string{`nri.pluginIndex: "7" must be two digits`}},
		"plugin index number": {"version: v1\nnri: {pluginIndex: 10}\n", []string{"nri.pluginIndex: want a string, got a number 10"}},
		"plugin name":         {"version: v1\nnri: {pluginName: \"Bad Name\"}\n", []string{`nri.pluginName: "Bad Name"`}},
		"relative root":       {"version: v1\nroot: host\n", []string{`root: "host" must be an absolute path`}},
		"relative state":      {"version: v1\nstateDir: var/lib\n", []string{`stateDir: "var/lib" must be an absolute path`}},
		"relative socket":     {"version: v1\nnri: {socket: nri.sock}\n", []string{`nri.socket: "nri.sock" must be an absolute path`}},
		"relative spec dir":   {"version: v1\ncdi: {specDir: cdi}\n", []string{`cdi.specDir: "cdi" must be an absolute path`}},
		"resource no slash":   {"version: v1\nresourceName: lpu\n", []string{`resourceName: "lpu" must be domain/name`}},
		"resource bad domain": {"version: v1\nresourceName: Hyper_Accel/lpu\n", []string{`domain "Hyper_Accel"`}},
		"resource k8s domain": {"version: v1\nresourceName: kubernetes.io/lpu\n", []string{"reserved for Kubernetes"}},
		"resource bad name":   {"version: v1\nresourceName: a.io/-lpu\n", []string{`name "-lpu"`}},
		"threshold zero":      {"version: v1\nhealth: {failureThreshold: -1}\n", []string{`health.failureThreshold: "-1" must be at least 1`}},
		"threshold float":     {"version: v1\nhealth: {recoveryThreshold: 1.5}\n", []string{"health.recoveryThreshold: want an integer, got a number 1.5"}},
		"duration negative":   {"version: v1\nhealth: {resyncInterval: -5s}\n", []string{`health.resyncInterval: "-5s" must be a duration greater than 0`}},
		"duration garbage":    {"version: v1\nhealth: {probeInterval: fast}\n", []string{`health.probeInterval: "fast" is not a duration`}},
		"duration number":     {"version: v1\nkubelet: {podResourcesTimeout: 5}\n", []string{"kubelet.podResourcesTimeout: want a duration string"}},
		"bool as string":      {"version: v1\nkubelet: {podResourcesCheck: \"yes\"}\n", []string{"kubelet.podResourcesCheck: want true or false"}},
		"mount relative":      {"version: v1\ninjection: {mounts: [{hostPath: usr/lib}]}\n", []string{`injection.mounts[0].hostPath: "usr/lib" must be an absolute path`}},
		"mount dotdot":        {"version: v1\ninjection: {mounts: [{hostPath: /usr/../etc}]}\n", []string{`injection.mounts[0].hostPath: "/usr/../etc" must not contain a ".." element`}},
		"mount dest dotdot":   {"version: v1\ninjection: {mounts: [{hostPath: /a, containerPath: /b/..}]}\n", []string{`injection.mounts[0].containerPath: "/b/.."`}},
		"mount duplicate":     {"version: v1\ninjection: {mounts: [{hostPath: /a}, {hostPath: /b, containerPath: /a/}]}\n", []string{`injection.mounts[1].containerPath: "/a" duplicates injection.mounts[0]`}},
		"env reserved":        {"version: v1\ninjection: {env: {LPU_VISIBLE_DEVICES: all}}\n", []string{`injection.env.LPU_VISIBLE_DEVICES: "LPU_VISIBLE_DEVICES" is set by lpu-nri`}},
		"env bad key":         {"version: v1\ninjection: {env: {\"1BAD\": x}}\n", []string{`injection.env.1BAD: "1BAD" is not a valid env name`}},
		"env key with =":      {"version: v1\ninjection: {env: {\"A=B\": x}}\n", []string{`injection.env.A=B: "A=B" is not a valid env name`}},
		"env value number":    {"version: v1\ninjection: {env: {A: 1}}\n", []string{"injection.env.A: want a string, got a number 1"}},
		"ring bad id":         {"version: v1\ntopology: {rings: [[lpu0, gpu1]]}\n", []string{`topology.rings[0][1]: "gpu1" is not a device ID (want lpuN)`}},
		"ring leading zero":   {"version: v1\ntopology: {rings: [[lpu01]]}\n", []string{`topology.rings[0][0]: "lpu01" is not a device ID`}},
		"ring dup":            {"version: v1\ntopology: {rings: [[lpu0, lpu1], [lpu1]]}\n", []string{`topology.rings[1][0]: "lpu1" duplicates topology.rings[0][1]`}},
		"ring empty":          {"version: v1\ntopology: {rings: [[]]}\n", []string{`topology.rings[0]: "" is empty`}},
		"rings need config":   {"version: v1\ntopology: {source: config}\n", []string{`topology.rings: "" required when topology.source is "config"`}},
		"rings ignored":       {"version: v1\ntopology: {source: sysfs, rings: [[lpu0]]}\n", []string{`topology.source: "sysfs" ignores topology.rings`}},
		"table needs path":    {"version: v1\ntopology: {source: table}\n", []string{`topology.networkTable: "" required when topology.source is "table"`}},
		"table relative":      {"version: v1\ntopology: {networkTable: links.txt}\n", []string{`topology.networkTable: "links.txt" must be an absolute path`}},
		"metrics address":     {"version: v1\nmetrics: {address: \"9400\"}\n", []string{`metrics.address: "9400" must be host:port`}},
		"metrics port":        {"version: v1\nmetrics: {address: \":99999\"}\n", []string{`metrics.address: ":99999" port "99999"`}},
		"tracing no port":     {"version: v1\ntracing: {endpoint: collector}\n", []string{`tracing.endpoint: "collector" must be host:port`}},
		"tracing scheme":      {"version: v1\ntracing: {endpoint: \"http://collector:4317\"}\n", []string{`tracing.endpoint: "http://collector:4317" must be host:port without a scheme`}},
		"tracing no host":     {"version: v1\ntracing: {endpoint: \":4317\"}\n", []string{`tracing.endpoint: ":4317" host "" must be a host name or IP address`}},
		"tracing port zero":   {"version: v1\ntracing: {endpoint: \"collector:0\"}\n", []string{`tracing.endpoint: "collector:0" port "0" is not a number 1-65535`}},
		"tracing port name":   {"version: v1\ntracing: {endpoint: \"collector:otlp\"}\n", []string{`port "otlp"`}},
		"tracing path":        {"version: v1\ntracing: {endpoint: \"a/b:4317\"}\n", []string{`tracing.endpoint: "a/b:4317" host "a/b"`}},
		"tracing insecure":    {"version: v1\ntracing: {insecure: \"yes\"}\n", []string{"tracing.insecure: want true or false"}},
		"tracing unknown":     {"version: v1\ntracing: {serviceName: x}\n", []string{"tracing.serviceName: unknown field (allowed: endpoint, insecure)"}},
		"many errors at once": {"version: v1\nallocation: {policy: x}\ninjection: {mode: yes-please}\nroot: z\n", []string{`allocation.policy: "x"`, `injection.mode: "yes-please"`, `root: "z"`}},
		"many unknown fields": {"version: v1\nfoo: 1\nbar: {baz: 2}\n", []string{"foo: unknown field", "bar: unknown field"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, tc.yaml)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded with %+v, want error", c)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nmissing %q", err, w)
				}
			}
		})
	}
}

func TestLoadFileErrors(t *testing.T) {
	if _, err := Load("/nonexistent/lpu.yaml"); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "/nonexistent/lpu.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
	big := writeFile(t, "version: v1\n#"+strings.Repeat("x", MaxFileSize))
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: err = %v", err)
	}
}

func TestValidateCollectsAll(t *testing.T) {
	c := &Config{} // nothing set, no defaults applied
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate of zero Config succeeded")
	}
	for _, field := range []string{"version", "resourceName", "root", "stateDir", "topology.source", "allocation.policy", "injection.mode",
		"health.resyncInterval", "health.probeInterval", "health.pollInterval", "health.failureThreshold", "health.recoveryThreshold",
		"kubelet.devicePluginDir", "kubelet.podResourcesSocket", "kubelet.podResourcesTimeout",
		"nri.socket", "nri.pluginIndex", "nri.pluginName", "cdi.specDir"} {
		if !strings.Contains(err.Error(), field+": ") {
			t.Errorf("error does not name %s:\n%v", field, err)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		"seconds":   {`"5s"`, 5 * time.Second, false},
		"composite": {`"1m30s"`, 90 * time.Second, false},
		"millis":    {`"100ms"`, 100 * time.Millisecond, false},
		"number":    {`5`, 0, true},
		"garbage":   {`"soon"`, 0, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var d Duration
			err := json.Unmarshal([]byte(tc.in), &d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil {
				if d.Duration != tc.want {
					t.Errorf("got %v, want %v", d.Duration, tc.want)
				}
				out, _ := json.Marshal(d)
				var back Duration
				if err := json.Unmarshal(out, &back); err != nil || back != d {
					t.Errorf("round trip %s -> %v, %v", out, back, err)
				}
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	c.Topology.Rings = [][]string{{"lpu0", "lpu1"}}
	c.Injection.Env = map[string]string{"A": "b"}
	c.Metrics.Address = "127.0.0.1:9400"
	c.Tracing = Tracing{Endpoint: "[::1]:4317", Insecure: true}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, c)
	}
}

// TestExampleFile: config/example.yaml loads and is exactly Default(),
// apart from empty-but-present collections (rings: [], env: {}), which the
// example writes out so that every field is shown.
func TestExampleFile(t *testing.T) {
	got, err := Load("example.yaml")
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	if len(got.Topology.Rings) != 0 || len(got.Injection.Env) != 0 {
		t.Fatalf("example sets rings or env: %+v", got)
	}
	got.Topology.Rings, got.Injection.Env = nil, nil
	if !reflect.DeepEqual(got, Default()) {
		t.Errorf("example.yaml differs from Default():\n%+v\n%+v", got, Default())
	}
}

// TestExampleHasEveryField: every field of Config (by YAML path) is written
// in example.yaml, so the documented example cannot drift from the schema.
func TestExampleHasEveryField(t *testing.T) {
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	collectPaths(reflect.TypeFor[Config](), "", &paths)
	if len(paths) < 25 {
		t.Fatalf("only %d field paths found: %v", len(paths), paths)
	}
	for _, p := range paths {
		if !hasPath(doc, p) {
			t.Errorf("example.yaml lacks field %s", p)
		}
	}
}

// collectPaths lists the YAML path of every leaf field; for a list of
// structs the element's fields are listed under "path[]".
func collectPaths(t reflect.Type, prefix string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p := join(prefix, name)
		ft := f.Type
		switch {
		case ft == reflect.TypeFor[Duration]():
			*out = append(*out, p)
		case ft.Kind() == reflect.Struct:
			collectPaths(ft, p, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			*out = append(*out, p)
			collectPaths(ft.Elem(), p+"[]", out)
		default:
			*out = append(*out, p)
		}
	}
}

func hasPath(v any, path string) bool {
	head, rest, more := strings.Cut(path, ".")
	list := strings.HasSuffix(head, "[]")
	head = strings.TrimSuffix(head, "[]")
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	child, ok := m[head]
	if !ok {
		return false
	}
	if list {
		items, ok := child.([]any)
		if !ok || len(items) == 0 {
			return false
		}
		child = items[0]
	}
	if !more {
		return true
	}
	return hasPath(child, rest)
}

func TestNewLogger(t *testing.T) {
	tests := map[string]struct {
		file      Log
		env       map[string]string
		wantJSON  bool
		wantDebug bool
		wantInfo  bool
		warnings  []string
	}{
		"defaults":            {Log{}, nil, true, false, true, nil},
		"file text debug":     {Log{Level: "debug", Format: "text"}, nil, false, true, true, nil},
		"env over file":       {Log{Level: "debug", Format: "text"}, map[string]string{EnvLogLevel: "error", EnvLogFormat: "json"}, true, false, false, nil},
		"env case":            {Log{}, map[string]string{EnvLogLevel: "DEBUG"}, true, true, true, nil},
		"bad env uses file":   {Log{Level: "debug"}, map[string]string{EnvLogLevel: "loud"}, true, true, true, []string{`LPU_LOG_LEVEL="loud" is not one of error, warn, info, debug`}},
		"bad env bad file":    {Log{Format: "xml"}, map[string]string{EnvLogFormat: "yaml"}, true, false, true, []string{`LPU_LOG_FORMAT="yaml"`, `log.format "xml" is not one of json, text; using "json"`}},
		"bad file level":      {Log{Level: "verbose"}, nil, true, false, true, []string{`log.level "verbose" is not one of error, warn, info, debug; using "info"`}},
		"warn hides info":     {Log{Level: "warn"}, nil, true, false, false, nil},
		"env format text bad": {Log{Format: "text"}, map[string]string{EnvLogFormat: "pretty"}, false, false, true, []string{"LPU_LOG_FORMAT"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			log, warnings := NewLogger(tc.file, &buf, func(k string) string { return tc.env[k] })
			if len(warnings) != len(tc.warnings) {
				t.Fatalf("warnings = %q, want %d matching %q", warnings, len(tc.warnings), tc.warnings)
			}
			for i, w := range tc.warnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %q lacks %q", warnings[i], w)
				}
			}
			log.Debug("d")
			log.Info("i")
			out := buf.String()
			if got := strings.Contains(out, `"msg":"d"`) || strings.Contains(out, "msg=d"); got != tc.wantDebug {
				t.Errorf("debug logged = %v, want %v: %s", got, tc.wantDebug, out)
			}
			if got := strings.Contains(out, `"msg":"i"`) || strings.Contains(out, "msg=i"); got != tc.wantInfo {
				t.Errorf("info logged = %v, want %v: %s", got, tc.wantInfo, out)
			}
			if tc.wantInfo || tc.wantDebug {
				if got := strings.HasPrefix(out, "{"); got != tc.wantJSON {
					t.Errorf("json = %v, want %v: %s", got, tc.wantJSON, out)
				}
			}
		})
	}
	// nil getenv is allowed.
	if _, w := NewLogger(Log{}, &bytes.Buffer{}, nil); len(w) != 0 {
		t.Errorf("nil getenv: warnings %q", w)
	}
}

// FuzzLoad: any input either fails or yields a config that validates, is
// version v1, and survives a Marshal/Parse round trip unchanged.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example), "version: v1\n", "", "version: v2\n", "version: v1\nallocation: {policy: strict}\n",
		"version: v1\ntopology: {source: config, rings: [[lpu0, lpu1]]}\n",
		"version: v1\ninjection: {mounts: [{hostPath: /a}], env: {A: b}}\n", "version: v1\nhealth: {resyncInterval: 1h}\n",
		"version: v1\nfoo: {bar: [1, 2]}\n", "version: &a v1\nroot: *a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if c.Version != Version {
			t.Fatalf("accepted version %q", c.Version)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip differs:\n%+v\n%+v", back, c)
		}
	})
}

// TestTracingEndpointAccepted: the endpoint forms the OTLP gRPC exporter
// dials are accepted.
func TestTracingEndpointAccepted(t *testing.T) {
	for _, e := range []string{"otel-collector:4317", "10.0.0.1:4317", "[::1]:4317", "localhost:65535", "collector.observability.svc.cluster.local:4317"} {
		t.Run(e, func(t *testing.T) {
			c := Default()
			c.Tracing.Endpoint = e
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}
