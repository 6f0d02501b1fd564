package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Defaults, used for every field a file leaves unset.
const (
	DefaultResourceName        = "hyperaccel.ai/lpu"
	DefaultRoot                = "/"
	DefaultStateDir            = "/var/lib/lpu"
	DefaultMountPath           = "/usr/lib/lpu"
	DefaultResyncInterval      = 5 * time.Second
	DefaultFailureThreshold    = 2
	DefaultRecoveryThreshold   = 2
	DefaultProbeInterval       = 100 * time.Millisecond
	DefaultPollInterval        = 500 * time.Millisecond
	DefaultKubeletRootDir      = "/var/lib/kubelet"
	DefaultPodResourcesTimeout = 500 * time.Millisecond
	DefaultNRISocket           = "/var/run/nri/nri.sock"
	DefaultPluginIndex         = "10"
	DefaultPluginName          = "lpu"
	DefaultCDISpecDir          = "/var/run/cdi"
	DefaultLogLevel            = "info"
	DefaultLogFormat           = "json"
)

// MaxFileSize bounds a config file; anything larger is refused unread.
const MaxFileSize = 1 << 20

// Default returns the configuration used with no file: every field at its
// default. Metrics stay disabled (empty address).
func Default() *Config {
	c := &Config{Version: Version}
	c.applyDefaults()
	return c
}

// applyDefaults fills every unset (zero) field. A list or map that is
// present but empty in the file stays empty: "mounts: []" means no mounts.
func (c *Config) applyDefaults() {
	setString(&c.ResourceName, DefaultResourceName)
	setString(&c.Root, DefaultRoot)
	setString(&c.StateDir, DefaultStateDir)
	c.applyDiscoveryDefaults()
	setString(&c.Topology.Source, device.TopologyAuto)
	setString(&c.Allocation.Policy, PolicyBestEffort)
	setString(&c.Injection.Mode, InjectionAuto)
	if c.Injection.Mounts == nil {
		c.Injection.Mounts = defaultMounts(c.Discovery.Backend)
	}
	for i := range c.Injection.Mounts {
		setString(&c.Injection.Mounts[i].ContainerPath, c.Injection.Mounts[i].HostPath)
	}
	setDuration(&c.Health.ResyncInterval, DefaultResyncInterval)
	setInt(&c.Health.FailureThreshold, DefaultFailureThreshold)
	setInt(&c.Health.RecoveryThreshold, DefaultRecoveryThreshold)
	setDuration(&c.Health.ProbeInterval, DefaultProbeInterval)
	setDuration(&c.Health.PollInterval, DefaultPollInterval)
	c.Kubelet.applyDefaults()
	setString(&c.NRI.Socket, DefaultNRISocket)
	setString(&c.NRI.PluginIndex, DefaultPluginIndex)
	setString(&c.NRI.PluginName, DefaultPluginName)
	setString(&c.CDI.SpecDir, DefaultCDISpecDir)
	setString(&c.Log.Level, DefaultLogLevel)
	setString(&c.Log.Format, DefaultLogFormat)
	c.Security.applyDefaults()
	if c.DRA.ArcSizes == nil {
		c.DRA.ArcSizes = []int{}
	}
	if c.DRA.DeviceClasses == nil {
		c.DRA.DeviceClasses = []string{}
	}
	if c.DRA.NodeLabels == nil {
		c.DRA.NodeLabels = new(true)
	}
}

func setString(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setDuration(p *Duration, v time.Duration) {
	if p.Duration == 0 {
		p.Duration = v
	}
}

// Load reads the YAML file at path, applies defaults and validates it. An
// empty path returns Default(). Unknown fields, a version other than v1 and
// invalid values are errors naming the YAML field path.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	// One byte past the limit is enough for Parse to refuse the file.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a YAML document (the contents of a config file), applies
// defaults and validates the result, like Load.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return nil, fmt.Errorf("version: missing (allowed: %s)", Version)
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if _, ok := raw.(map[string]any); !ok {
		return nil, fmt.Errorf("top level: want a mapping of fields, got %s", jsonKind(raw))
	}
	if errs := checkFields(raw, reflect.TypeFor[Config](), ""); len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode: %w", describeJSONError(err))
	}
	if c.Version != Version {
		return nil, fmt.Errorf("version: %q not supported (allowed: %s)", c.Version, Version)
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// checkFields walks the decoded YAML against the Config type and reports
// every unknown field and every value of the wrong kind with its full path,
// e.g. `allocation.polcy: unknown field (allowed: policy)`.
func checkFields(v any, t reflect.Type, path string) []error {
	if v == nil {
		return nil // null leaves the field at its default
	}
	if t == reflect.TypeFor[Duration]() {
		return checkDuration(v, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return checkStruct(v, t, path)
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return []error{fmt.Errorf("%s: want a list, got %s", path, jsonKind(v))}
		}
		var errs []error
		for i, e := range s {
			errs = append(errs, checkFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return []error{fmt.Errorf("%s: want a mapping, got %s", path, jsonKind(v))}
		}
		var errs []error
		for _, k := range sortedKeys(m) {
			errs = append(errs, checkFields(m[k], t.Elem(), join(path, k))...)
		}
		return errs
	}
	if err := checkScalar(v, t.Kind(), path); err != nil {
		return []error{err}
	}
	return nil
}

// checkDuration checks a Duration field: a string time.ParseDuration takes.
func checkDuration(v any, path string) []error {
	s, ok := v.(string)
	if !ok {
		return []error{fmt.Errorf("%s: want a duration string like \"5s\", got %s %s", path, jsonKind(v), shortJSON(v))}
	}
	if _, err := time.ParseDuration(s); err != nil {
		return []error{fmt.Errorf("%s: %q is not a duration (want e.g. \"5s\", \"100ms\")", path, s)}
	}
	return nil
}

// checkStruct checks a mapping against the struct type t: every key must
// be one of its JSON field names, and each value must fit its field.
func checkStruct(v any, t reflect.Type, path string) []error {
	m, ok := v.(map[string]any)
	if !ok {
		return []error{fmt.Errorf("%s: want a mapping, got %s", path, jsonKind(v))}
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	var errs []error
	for _, k := range sortedKeys(m) {
		ft, ok := fields[k]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown field (allowed: %s)", join(path, k), strings.Join(sortedKeys(fields), ", ")))
			continue
		}
		errs = append(errs, checkFields(m[k], ft, join(path, k))...)
	}
	return errs
}

// checkScalar checks a string, bool or int field's value.
func checkScalar(v any, kind reflect.Kind, path string) error {
	switch kind {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string, got %s %s", path, jsonKind(v), shortJSON(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want true or false, got %s %s", path, jsonKind(v), shortJSON(v))
		}
	case reflect.Int:
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) || n < -1<<31 || n > 1<<31-1 {
			return fmt.Errorf("%s: want an integer, got %s %s", path, jsonKind(v), shortJSON(v))
		}
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

func shortJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// describeJSONError keeps the decoder's message but adds the field path
// when the decoder knows it.
func describeJSONError(err error) error {
	if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
		return fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	return err
}
