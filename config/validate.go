package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Allowed values of the enumerated fields, in the order errors list them.
var (
	AllowedPolicies       = []string{PolicyBestEffort, PolicyStrict}
	AllowedInjectionModes = []string{InjectionAuto, InjectionNRI, InjectionCDI}
	// The topology sources are pkg/device's (device.TopologyAuto, ...).
	AllowedTopologySources = []string{device.TopologyAuto, device.TopologyConfig, device.TopologyTable, device.TopologySysfs, device.TopologyIndex}
	AllowedLogLevels       = []string{"error", "warn", "info", "debug"}
	AllowedLogFormats      = []string{"json", "text"}
)

var (
	dnsSubdomain  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	pluginIndex   = regexp.MustCompile(`^[0-9]{2}$`)
	pluginName    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
	envKey        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks every field and returns all problems at once
// (errors.Join), each naming the YAML field path, the bad value and what is
// allowed. Log level and format are not checked here: bad values there fall
// back with a warning (NewLogger).
func (c *Config) Validate() error {
	var v validator
	if c.Version != Version {
		v.add("version", c.Version, "not supported (allowed: %s)", Version)
	}
	v.resourceName("resourceName", c.ResourceName)
	v.absPath("root", c.Root)
	v.absPath("stateDir", c.StateDir)

	v.discovery(c)
	v.oneOf("topology.source", c.Topology.Source, AllowedTopologySources)
	v.rings(c.Topology)
	if c.Topology.NetworkTable != "" {
		v.absPath("topology.networkTable", c.Topology.NetworkTable)
	} else if c.Topology.Source == device.TopologyTable {
		v.add("topology.networkTable", "", "required when topology.source is %q", device.TopologyTable)
	}

	v.oneOf("allocation.policy", c.Allocation.Policy, AllowedPolicies)

	v.oneOf("injection.mode", c.Injection.Mode, AllowedInjectionModes)
	seenDest := map[string]int{}
	for i, m := range c.Injection.Mounts {
		p := fmt.Sprintf("injection.mounts[%d]", i)
		v.mountPath(p+".hostPath", m.HostPath)
		dest := m.ContainerPath
		if dest == "" {
			dest = m.HostPath
		} else {
			v.mountPath(p+".containerPath", m.ContainerPath)
		}
		dest = filepath.Clean(dest)
		if j, dup := seenDest[dest]; dup {
			v.add(p+".containerPath", dest, "duplicates injection.mounts[%d]", j)
		}
		seenDest[dest] = i
	}
	for _, k := range sortedKeys(c.Injection.Env) {
		p := "injection.env." + k
		switch {
		case !envKey.MatchString(k):
			v.add(p, k, "is not a valid env name (want letters, digits, _; not starting with a digit)")
		case k == inject.EnvVisibleDevices:
			v.add(p, k, "is set by lpu-nri and cannot be configured")
		}
		if strings.ContainsRune(c.Injection.Env[k], 0) {
			v.add(p, c.Injection.Env[k], "contains a NUL byte")
		}
	}

	v.positive("health.resyncInterval", c.Health.ResyncInterval)
	v.positive("health.probeInterval", c.Health.ProbeInterval)
	v.positive("health.pollInterval", c.Health.PollInterval)
	v.atLeastOne("health.failureThreshold", c.Health.FailureThreshold)
	v.atLeastOne("health.recoveryThreshold", c.Health.RecoveryThreshold)

	c.Kubelet.validate(&v)

	v.absPath("nri.socket", c.NRI.Socket)
	if !pluginIndex.MatchString(c.NRI.PluginIndex) {
		v.add("nri.pluginIndex", c.NRI.PluginIndex, "must be two digits, e.g. \"10\"")
	}
	if len(c.NRI.PluginName) > 63 || !pluginName.MatchString(c.NRI.PluginName) {
		v.add("nri.pluginName", c.NRI.PluginName, "must be lower-case letters, digits, '-', '_' or '.', at most 63")
	}

	v.absPath("cdi.specDir", c.CDI.SpecDir)

	if a := c.Metrics.Address; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil {
			v.add("metrics.address", a, "must be host:port (or empty to disable): %v", err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			v.add("metrics.address", a, "port %q is not a number 0-65535", port)
		}
	}
	if e := c.Tracing.Endpoint; e != "" {
		v.dialAddress("tracing.endpoint", e)
	}
	c.Security.validate(&v)
	c.DRA.validate(&v)
	return joinErrors(v.errs)
}

type validator struct{ errs []error }

func (v *validator) add(path, value, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %q %s", path, value, fmt.Sprintf(format, args...)))
}

func (v *validator) oneOf(path, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		v.add(path, value, "is not allowed (allowed: %s)", strings.Join(allowed, ", "))
	}
}

func (v *validator) absPath(path, value string) {
	switch {
	case value == "":
		v.add(path, value, "must be an absolute path")
	case !filepath.IsAbs(value):
		v.add(path, value, "must be an absolute path")
	case strings.ContainsRune(value, 0):
		v.add(path, value, "contains a NUL byte")
	}
}

// mountPath is absPath plus no ".." element, so a mount cannot climb out of
// what the operator wrote.
func (v *validator) mountPath(path, value string) {
	if value == "" || !filepath.IsAbs(value) || strings.ContainsRune(value, 0) {
		v.absPath(path, value)
		return
	}
	if slices.Contains(strings.Split(value, "/"), "..") {
		v.add(path, value, "must not contain a \"..\" element")
	}
}

// dialAddress checks an address to connect to: host:port with a non-empty
// host and a port 1-65535, no scheme or path (the OTLP gRPC exporter takes
// a bare endpoint).
func (v *validator) dialAddress(path, value string) {
	if strings.Contains(value, "://") {
		v.add(path, value, "must be host:port without a scheme, e.g. \"otel-collector:4317\"")
		return
	}
	host, port, err := net.SplitHostPort(value)
	switch {
	case err != nil:
		v.add(path, value, "must be host:port, e.g. \"otel-collector:4317\" (or empty to disable): %v", err)
	case host == "" || strings.ContainsAny(host, "/ \t\n\x00"):
		v.add(path, value, "host %q must be a host name or IP address", host)
	default:
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			v.add(path, value, "port %q is not a number 1-65535", port)
		}
	}
}

func (v *validator) positive(path string, d Duration) {
	if d.Duration <= 0 {
		v.add(path, d.Duration.String(), "must be a duration greater than 0")
	}
}

func (v *validator) atLeastOne(path string, n int) {
	if n < 1 {
		v.add(path, strconv.Itoa(n), "must be at least 1")
	}
}

func (v *validator) resourceName(path, value string) {
	domain, name, ok := strings.Cut(value, "/")
	switch {
	case !ok || domain == "" || name == "":
		v.add(path, value, "must be domain/name, e.g. %q", DefaultResourceName)
	case len(domain) > 253 || !dnsSubdomain.MatchString(domain):
		v.add(path, value, "domain %q must be a lower-case DNS name", domain)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		v.add(path, value, "domain %q is reserved for Kubernetes", domain)
	case len(name) > 63 || !qualifiedName.MatchString(name):
		v.add(path, value, "name %q must be letters, digits, '-', '_' or '.', at most 63", name)
	}
}

func (v *validator) rings(t Topology) {
	switch {
	case t.Source == device.TopologyConfig && len(t.Rings) == 0:
		v.add("topology.rings", "", "required when topology.source is %q", device.TopologyConfig)
	case len(t.Rings) > 0 && t.Source != device.TopologyConfig && t.Source != device.TopologyAuto:
		v.add("topology.source", t.Source, "ignores topology.rings; use %q or %q, or remove the rings", device.TopologyConfig, device.TopologyAuto)
	}
	seen := map[string]string{}
	for r, ring := range t.Rings {
		if len(ring) == 0 {
			v.add(fmt.Sprintf("topology.rings[%d]", r), "", "is empty")
		}
		for i, id := range ring {
			p := fmt.Sprintf("topology.rings[%d][%d]", r, i)
			if !validID(id) {
				v.add(p, id, "is not a device ID (want lpuN)")
				continue
			}
			if other, dup := seen[id]; dup {
				v.add(p, id, "duplicates %s", other)
				continue
			}
			seen[id] = p
		}
	}
}

// validID mirrors device.ParseID (config does not import pkg/device): "lpu"
// then a decimal without sign or leading zeros, below 1<<16.
func validID(id string) bool {
	digits, ok := strings.CutPrefix(id, "lpu")
	if !ok || digits == "" || len(digits) > 5 || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	n, err := strconv.Atoi(digits)
	return err == nil && n >= 0 && n < 1<<16 && strconv.Itoa(n) == digits
}

func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
