package device_test

import (
	"os"
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// TestXilinxSensors: the user function's XMC values come over the mailbox
// and read 0 when it fails, so an exact 0 °C or 0 W is missing, not a
// measurement (temperature then falls back to hwmon); the hwmon fallback
// takes the xmc "_user" hwmon, else the first by number with a
// temp*_input, never the first by name (hwmon10 sorts before hwmon5).
func TestXilinxSensors(t *testing.T) {
	tests := map[string]struct {
		setup   func(t *testing.T, u string)
		temp    float64
		power   float64
		missing []string // beyond utilisation and memory used
	}{
		"xmc readings": {temp: 43, power: 24},
		"xmc temperature 0: hwmon instead": {
			setup: func(t *testing.T, u string) { write(t, glob1(t, u+"/xmc.u.*")+"/xmc_fpga_temp", "0\n") },
			temp:  43, power: 24,
		},
		"xmc power 0: missing": {
			setup:   func(t *testing.T, u string) { write(t, glob1(t, u+"/xmc.u.*")+"/xmc_power", "0\n") },
			temp:    43,
			missing: []string{device.AttrPower},
		},
		"xmc and hwmon both 0: missing": {
			setup: func(t *testing.T, u string) {
				write(t, glob1(t, u+"/xmc.u.*")+"/xmc_fpga_temp", "0\n")
				write(t, glob1(t, u+"/hwmon/hwmon*")+"/temp4_input", "0\n")
			},
			power:   24,
			missing: []string{device.AttrTemperature},
		},
		"hwmon10 without temperatures sorts first by name": {
			setup: func(t *testing.T, u string) {
				must(t, os.RemoveAll(glob1(t, u+"/xmc.u.*")))
				write(t, u+"/hwmon/hwmon10/name", "xilinx_sysmon\n")
				write(t, u+"/hwmon/hwmon10/in0_input", "850\n")
			},
			temp:    43,
			missing: []string{device.AttrPower},
		},
		"the _user hwmon wins over an earlier one": {
			setup: func(t *testing.T, u string) {
				must(t, os.RemoveAll(glob1(t, u+"/xmc.u.*")))
				write(t, u+"/hwmon/hwmon7/name", "xilinx_u55c_gen3x16_xdma_base_3_user\n")
				write(t, u+"/hwmon/hwmon7/temp1_input", "50000\n")
			},
			temp:    50,
			missing: []string{device.AttrPower},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := orion(t, 4)
			if tc.setup != nil {
				tc.setup(t, fn(root, card2))
			}
			tel, err := xilinx(root).Telemetry("lpu2")
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{device.AttrUtilization, device.AttrMemoryUsed}, tc.missing...)
			if tel.TemperatureCelsius != tc.temp || tel.PowerWatts != tc.power || !slices.Equal(tel.Missing, want) {
				t.Fatalf("telemetry %+v, want %v °C %v W missing %v", tel, tc.temp, tc.power, want)
			}
		})
	}
}
