package device_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

func TestTelemetry(t *testing.T) {
	all := map[string]string{
		device.AttrUtilization: "37.5\n",
		device.AttrMemoryUsed:  "1073741824\n",
		device.AttrMemoryTotal: "34359738368\n",
		device.AttrTemperature: "42500\n",
		device.AttrPower:       "28500000\n",
	}
	with := func(over map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			m[k] = v
		}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	full := device.Telemetry{
		UtilizationPercent: 37.5, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 32 << 30,
		TemperatureCelsius: 42.5, PowerWatts: 28.5,
	}
	tests := map[string]struct {
		files   map[string]string
		omit    []string
		want    device.Telemetry
		wantErr []string
	}{
		"all present": {files: all, want: full},
		"none present": {
			want: device.Telemetry{Missing: []string{device.AttrUtilization, device.AttrMemoryUsed,
				device.AttrMemoryTotal, device.AttrTemperature, device.AttrPower}},
		},
		"some missing": {
			files: map[string]string{device.AttrTemperature: "-5000"},
			want: device.Telemetry{TemperatureCelsius: -5, Missing: []string{device.AttrUtilization,
				device.AttrMemoryUsed, device.AttrMemoryTotal, device.AttrPower}},
		},
		"unparsable values name file and value": {
			files: with(map[string]string{device.AttrMemoryUsed: "lots\n", device.AttrPower: "-1"}),
			want:  device.Telemetry{UtilizationPercent: 37.5, MemoryTotalBytes: 32 << 30, TemperatureCelsius: 42.5},
			wantErr: []string{
				`/sys/class/lpu/lpu0/memory_used_bytes: value "lots": want an unsigned integer`,
				`/sys/class/lpu/lpu0/power_microwatts: value "-1": want an unsigned integer`,
			},
		},
		"utilization out of range": {
			files:   with(map[string]string{device.AttrUtilization: "101"}),
			wantErr: []string{`/sys/class/lpu/lpu0/utilization_percent: value "101": want a number from 0 to 100`},
		},
		"utilization NaN": {
			files:   with(map[string]string{device.AttrUtilization: "NaN"}),
			wantErr: []string{`utilization_percent: value "NaN"`},
		},
		"temperature below absolute zero": {
			files:   with(map[string]string{device.AttrTemperature: "-300000"}),
			wantErr: []string{`temperature_millicelsius: value "-300000"`},
		},
		"temperature in degrees with a fraction": {
			files:   with(map[string]string{device.AttrTemperature: "42.5"}),
			wantErr: []string{`temperature_millicelsius: value "42.5": want integer millidegrees`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, devicetest.Row{Index: 0, Files: tc.files})
			got, err := device.NewSysfs(root).Telemetry("lpu0")
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, got %+v", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\n does not contain %q", err, w)
					}
				}
				if strings.Contains(err.Error(), root) {
					t.Errorf("error names the temp root: %v", err)
				}
				if reflect.DeepEqual(tc.want, device.Telemetry{}) {
					return
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTelemetryBadDevice(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0})
	s := device.NewSysfs(root)
	for id, want := range map[string]string{
		"lpu1":  "telemetry of lpu1: /sys/class/lpu/lpu1 missing",
		"gpu0":  `device id "gpu0"`,
		"../x":  `device id "../x"`,
		"lpu01": `device id "lpu01"`,
	} {
		if _, err := s.Telemetry(id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Telemetry(%q) err = %v, want containing %q", id, err, want)
		}
	}
}

func TestTelemetrySimulated(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 8, Rings: 1}); err != nil {
		t.Fatal(err)
	}
	s := device.NewSysfs(root)
	for i := range 8 {
		tm, err := s.Telemetry(device.ID(i))
		if err != nil || len(tm.Missing) > 0 {
			t.Fatalf("lpu%d: %+v, %v", i, tm, err)
		}
		if tm.MemoryTotalBytes == 0 || tm.MemoryUsedBytes > tm.MemoryTotalBytes ||
			tm.TemperatureCelsius < 20 || tm.TemperatureCelsius > 90 || tm.PowerWatts <= 0 || tm.PowerWatts > 500 {
			t.Errorf("lpu%d: implausible telemetry %+v", i, tm)
		}
	}
}
