package config

import "time"

// Version is the only config schema version this build reads.
const Version = "v1"

// Allocation policies (Allocation.Policy).
const (
	PolicyBestEffort = "best-effort"
	PolicyStrict     = "strict"
)

// Injection modes (Injection.Mode).
const (
	InjectionNRI  = "nri"
	InjectionCDI  = "cdi"
	InjectionAuto = "auto"
)

// Config is the versioned node configuration shared by both daemons. Field
// names in errors are the YAML paths, e.g. "allocation.policy".
type Config struct {
	Version      string     `json:"version"`
	ResourceName string     `json:"resourceName"` // default hyperaccel.ai/lpu
	Root         string     `json:"root"`         // discovery root, default "/"
	StateDir     string     `json:"stateDir"`     // seal key, NRI readiness; default /var/lib/lpu
	Discovery    Discovery  `json:"discovery"`
	Simulate     Simulate   `json:"simulate"`
	Topology     Topology   `json:"topology"`
	Allocation   Allocation `json:"allocation"`
	Injection    Injection  `json:"injection"`
	Health       Health     `json:"health"`
	Kubelet      Kubelet    `json:"kubelet"`
	NRI          NRI        `json:"nri"`
	CDI          CDI        `json:"cdi"`
	Metrics      Metrics    `json:"metrics"`
	Tracing      Tracing    `json:"tracing"`
	Log          Log        `json:"log"`
	Security     Security   `json:"security"` // config/security.go
	DRA          DRA        `json:"dra"`      // config/dra.go
}

// Topology says where ring layout comes from.
type Topology struct {
	Source       string     `json:"source"`       // auto|config|table|sysfs|index; default auto
	Rings        [][]string `json:"rings"`        // explicit rings of device IDs, in ring order
	NetworkTable string     `json:"networkTable"` // host path of the vendor link table; read under Root
}

// Allocation configures ring allocation.
type Allocation struct {
	Policy string `json:"policy"` // best-effort|strict; default best-effort
}

// Mount is one host path bind-mounted read-only into LPU containers.
type Mount struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"` // default: HostPath
}

// Injection configures what reaches a container holding LPUs.
type Injection struct {
	Mode   string            `json:"mode"`   // nri|cdi|auto; default auto
	Mounts []Mount           `json:"mounts"` // driver libraries and tools; default /usr/lib/lpu
	Env    map[string]string `json:"env"`    // extra env for LPU containers
}

// Health configures probing and flap damping.
type Health struct {
	ResyncInterval    Duration `json:"resyncInterval"`    // periodic full rediscovery; default 5s
	PollInterval      Duration `json:"pollInterval"`      // cheap status re-read of every device; default 500ms
	FailureThreshold  int      `json:"failureThreshold"`  // consecutive bad probes before Unhealthy; default 2
	RecoveryThreshold int      `json:"recoveryThreshold"` // consecutive good probes before Healthy again; default 2
	ProbeInterval     Duration `json:"probeInterval"`     // spacing of confirming re-probes; default 100ms
}

// Kubelet locates the kubelet's sockets. The paths default to their place
// under RootDir; a path set explicitly (here or by a flag) wins.
type Kubelet struct {
	RootDir             string   `json:"rootDir"`             // the kubelet's --root-dir; default /var/lib/kubelet
	DevicePluginDir     string   `json:"devicePluginDir"`     // default <rootDir>/device-plugins
	PodResourcesSocket  string   `json:"podResourcesSocket"`  // default <rootDir>/pod-resources/kubelet.sock
	PodResourcesCheck   bool     `json:"podResourcesCheck"`   // NRI cross-check with PodResources; default false
	PodResourcesTimeout Duration `json:"podResourcesTimeout"` // default 500ms
}

// NRI configures the NRI plugin.
type NRI struct {
	Socket      string `json:"socket"`      // default /var/run/nri/nri.sock
	PluginIndex string `json:"pluginIndex"` // two digits; default "10"
	PluginName  string `json:"pluginName"`  // default lpu
}

// CDI configures spec generation.
type CDI struct {
	SpecDir string `json:"specDir"` // default /var/run/cdi
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	Address string `json:"address"` // host:port; empty disables
}

// Tracing configures OpenTelemetry traces (an Allocate span in the device
// plugin, a CreateContainer span in lpu-nri linked to it). Off by default.
// Export failures never affect allocation or injection.
type Tracing struct {
	Endpoint string `json:"endpoint"` // OTLP gRPC collector, host:port (no scheme); empty disables
	Insecure bool   `json:"insecure"` // plaintext gRPC instead of TLS; default false (TLS)
}

// Log configures logging. Invalid values fall back to defaults with a warning.
type Log struct {
	Level  string `json:"level"`  // error|warn|info|debug; default info
	Format string `json:"format"` // json|text; default json
}

// Duration is a time.Duration written as a Go duration string ("5s") in YAML.
type Duration struct{ time.Duration }
