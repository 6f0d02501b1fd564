package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestDiscoveryConfig(t *testing.T) {
	tests := map[string]struct {
		yaml  string
		err   string
		check func(t *testing.T, c *Config)
	}{
		"defaults: lpu, simulate follows": {
			check: func(t *testing.T, c *Config) {
				d := c.Discovery.DeviceDiscovery()
				if d.Backend != device.BackendLPU || c.Simulate.Backend != device.BackendLPU || d.Xilinx.Shell != device.DefaultXilinxShell || d.Xilinx.NoManagementNodes {
					t.Errorf("%+v simulate %q", d, c.Simulate.Backend)
				}
			},
		},
		"xilinx, simulate follows the backend": {
			yaml: "discovery:\n  backend: xilinx\n",
			check: func(t *testing.T, c *Config) {
				if c.Simulate.Backend != device.BackendXilinx || c.Discovery.DeviceDiscovery().Backend != device.BackendXilinx {
					t.Errorf("simulate %q", c.Simulate.Backend)
				}
			},
		},
		"shell check off, no management nodes": {
			yaml: "discovery:\n  backend: xilinx\n  xilinx:\n    shell: \"\"\n    managementNodes: false\n",
			check: func(t *testing.T, c *Config) {
				d := c.Discovery.DeviceDiscovery()
				if d.Xilinx.Shell != "" || !d.Xilinx.NoManagementNodes {
					t.Errorf("%+v", d.Xilinx)
				}
			},
		},
		"simulate another backend": {
			yaml: "simulate:\n  backend: pci\n",
			check: func(t *testing.T, c *Config) {
				if c.Simulate.Backend != device.BackendPCI || c.Discovery.Backend != device.BackendLPU {
					t.Errorf("%+v %+v", c.Simulate, c.Discovery)
				}
			},
		},
		"unknown backend":    {yaml: "discovery:\n  backend: gpu\n", err: `discovery.backend: "gpu" is not allowed (allowed: lpu, xilinx, pci)`},
		"unknown simulate":   {yaml: "simulate:\n  backend: fpga\n", err: `simulate.backend: "fpga" is not allowed`},
		"bad vendor":         {yaml: "discovery:\n  xilinx:\n    vendor: \"10ee\"\n", err: `discovery.xilinx.vendor: "10ee" must be a PCI ID`},
		"bad user device":    {yaml: "discovery:\n  xilinx:\n    userDevice: \"0x505\"\n", err: `discovery.xilinx.userDevice: "0x505"`},
		"bad class":          {yaml: "discovery:\n  pci:\n    class: \"0x12\"\n", err: `discovery.pci.class: "0x12" must be a PCI class`},
		"class dir escapes":  {yaml: "discovery:\n  pci:\n    classDir: \"a/b\"\n", err: `discovery.pci.classDir: "a/b" must be one directory name`},
		"health attr escape": {yaml: "discovery:\n  pci:\n    healthAttribute: \"../x\"\n", err: `discovery.pci.healthAttribute: "../x"`},
		"unknown field":      {yaml: "discovery:\n  xilinx:\n    shel: x\n", err: "shel"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Load(writeFile(t, "version: v1\n"+tc.yaml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want one line with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// TestPCIDefaultMounts: a Bertha node's containers get go-halib's user-mode
// driver by default; an explicit list (empty too) still wins, and the
// other backends keep /usr/lib/lpu.
func TestPCIDefaultMounts(t *testing.T) {
	libha := []Mount{
		{HostPath: "/usr/local/lib/libha_driver.so", ContainerPath: "/usr/local/lib/libha_driver.so"},
		{HostPath: "/usr/local/include/ha_driver.h", ContainerPath: "/usr/local/include/ha_driver.h"},
		{HostPath: "/usr/local/lib/pkgconfig/libha_driver.pc", ContainerPath: "/usr/local/lib/pkgconfig/libha_driver.pc"},
	}
	tests := map[string]struct {
		yaml string
		want []Mount
	}{
		"pci":                {yaml: "discovery: {backend: pci}\n", want: libha},
		"pci, explicit list": {yaml: "discovery: {backend: pci}\ninjection: {mounts: [{hostPath: /opt/ha}]}\n", want: []Mount{{HostPath: "/opt/ha", ContainerPath: "/opt/ha"}}},
		"pci, no mounts":     {yaml: "discovery: {backend: pci}\ninjection: {mounts: []}\n", want: []Mount{}},
		"xilinx":             {yaml: "discovery: {backend: xilinx}\n", want: []Mount{{HostPath: DefaultMountPath, ContainerPath: DefaultMountPath}}},
		"lpu":                {yaml: "", want: []Mount{{HostPath: DefaultMountPath, ContainerPath: DefaultMountPath}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Load(writeFile(t, "version: v1\n"+tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Injection.Mounts, tc.want) {
				t.Fatalf("mounts %+v, want %+v", c.Injection.Mounts, tc.want)
			}
		})
	}
}

func TestPCIDriverConfig(t *testing.T) {
	c, err := Load(writeFile(t, "version: v1\ndiscovery: {backend: pci, pci: {driver: bertha}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Discovery.DeviceDiscovery().PCI.Driver; got != "bertha" {
		t.Fatalf("driver %q, want bertha", got)
	}
	if _, err := Load(writeFile(t, "version: v1\ndiscovery: {pci: {driver: \"a/b\"}}\n")); err == nil || !strings.Contains(err.Error(), `discovery.pci.driver: "a/b" must be a driver name`) {
		t.Fatalf("err %v", err)
	}
}
