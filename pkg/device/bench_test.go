package device_test

import (
	"context"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

func BenchmarkDiscover16(b *testing.B) {
	root := b.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 16, Rings: 2}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for name, opts := range map[string][]device.Option{
		"auto-sysfs": nil,
		"table":      {device.WithNetworkTable(device.DefaultNetworkTable)},
		"index":      {device.WithTopologySource(device.TopologyIndex)},
	} {
		b.Run(name, func(b *testing.B) {
			s := device.NewSysfs(root, opts...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Discover(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkProbeHealth(b *testing.B) {
	root := b.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 16, Rings: 2}); err != nil {
		b.Fatal(err)
	}
	s := device.NewSysfs(root)
	b.ReportAllocs()
	for b.Loop() {
		if h := s.ProbeHealth("lpu7"); !h.Healthy {
			b.Fatal(h.Reason)
		}
	}
}
