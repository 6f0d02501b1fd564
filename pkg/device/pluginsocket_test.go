package device

import "testing"

func TestPluginSocketName(t *testing.T) {
	tests := map[string]string{
		"hyperaccel.ai/lpu":    "lpu.sock",
		"example.com/lpu-v2":   "lpu-v2.sock",
		"example.com/a b":      "a-b.sock",
		"example.com/x_y.z-ok": "x_y.z-ok.sock",
		"example.com/λpu":      "-pu.sock",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := PluginSocketName(in); got != want {
				t.Fatalf("PluginSocketName(%q) = %q, want %q", in, got, want)
			}
		})
	}
}
