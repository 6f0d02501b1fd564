package claimstatus

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := Data{LPUs: []string{"lpu7", "lpu0"}, Ring: 0, Start: 7, Size: 2, DeviceNodes: []string{"/dev/lpu7", "/dev/lpu0"}}
	b, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.LPUs, in.LPUs) || !slices.Equal(out.DeviceNodes, in.DeviceNodes) || out.Ring != 0 || out.Start != 7 || out.Size != 2 {
		t.Fatalf("round trip: %+v → %s → %+v", in, b, out)
	}
}

// A ring too long for its paths to fit the API's limit keeps its LPUs.
func TestMarshalDropsPathsOverLimit(t *testing.T) {
	n := 600
	d := Data{Size: n}
	for i := range n {
		d.LPUs = append(d.LPUs, fmt.Sprintf("lpu%d", i))
		d.DeviceNodes = append(d.DeviceNodes, fmt.Sprintf("/dev/lpu%d", i))
	}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxBytes || strings.Contains(string(b), "deviceNodes") {
		t.Fatalf("%d bytes, paths kept: %v", len(b), strings.Contains(string(b), "deviceNodes"))
	}
	out, err := Parse(b)
	if err != nil || len(out.LPUs) != n {
		t.Fatalf("parse: %v, %d LPUs", err, len(out.LPUs))
	}
}

func TestParseRefuses(t *testing.T) {
	for _, raw := range []string{
		``, `{`, `[]`, `{"lpus":["lpu0"],"ring":0,"start":0,"size":2}`,
		`{"lpus":["lpu0"],"ring":-1,"start":0,"size":1}`,
		`{"lpus":[""],"ring":0,"start":0,"size":1}`,
		`{"lpus":["lpu0"],"ring":0,"start":0,"size":1,"extra":1}`,
		`{"lpus":["lpu0"],"ring":0,"start":0,"size":1} {}`,
		`{"lpus":["lpu0","lpu1"],"ring":0,"start":0,"size":2,"deviceNodes":["/dev/lpu0"]}`,
	} {
		if d, err := Parse([]byte(raw)); err == nil {
			t.Errorf("Parse(%s) = %+v, want an error", raw, d)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"lpus":["lpu7","lpu0"],"ring":0,"start":7,"size":2,"deviceNodes":["/dev/lpu7","/dev/lpu0"]}`))
	f.Add([]byte(`{"lpus":["lpu0"],"ring":0,"start":0,"size":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := Parse(raw)
		if err != nil {
			return
		}
		if len(d.LPUs) != d.Size || d.Size <= 0 {
			t.Fatalf("accepted %s as %+v", raw, d)
		}
		b, err := d.Marshal()
		if err != nil {
			t.Fatalf("accepted %s but cannot encode it: %v", raw, err)
		}
		again, err := Parse(b)
		// Re-encoding may escape more than the input did and so drop the
		// paths to stay under the limit; never the LPUs.
		paths := again.DeviceNodes == nil || slices.Equal(again.DeviceNodes, d.DeviceNodes)
		if err != nil || !slices.Equal(again.LPUs, d.LPUs) || !paths {
			t.Fatalf("%s → %s does not parse back: %v", raw, b, err)
		}
	})
}
