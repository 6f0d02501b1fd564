package inject

import "testing"

// BenchmarkSpec: rendering the CDI spec of an 8-LPU node.
func BenchmarkSpec(b *testing.B) {
	inv := inventory(8, 8, 0)
	opts := Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"LPU_LOG_LEVEL": "info"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Spec(inv, opts); err != nil {
			b.Fatal(err)
		}
	}
}
