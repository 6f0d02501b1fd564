package inject_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

func TestParseIDs(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"one":               {in: "lpu0", want: []string{"lpu0"}},
		"wrap-around arc":   {in: "lpu7,lpu0,lpu1", want: []string{"lpu7", "lpu0", "lpu1"}},
		"large index":       {in: "lpu65535", want: []string{"lpu65535"}},
		"empty":             {in: "", wantErr: "devices value is empty"},
		"empty element":     {in: "lpu0,,lpu1", wantErr: `devices element 1 is empty`},
		"trailing comma":    {in: "lpu0,", wantErr: `devices element 1 is empty`},
		"leading comma":     {in: ",lpu0", wantErr: `devices element 0 is empty`},
		"space after comma": {in: "lpu0, lpu1", wantErr: `devices element 1 " lpu1": want lpuN`},
		"trailing newline":  {in: "lpu0\n", wantErr: `devices element 0 "lpu0\n"`},
		"path not id":       {in: "/dev/lpu0", wantErr: `devices element 0 "/dev/lpu0"`},
		"leading zero":      {in: "lpu0,lpu01", wantErr: `devices element 1 "lpu01"`},
		"sign":              {in: "lpu+1", wantErr: `"lpu+1"`},
		"upper case":        {in: "LPU1", wantErr: `"LPU1"`},
		"too large":         {in: "lpu65536", wantErr: `"lpu65536"`},
		"other prefix":      {in: "gpu0", wantErr: `"gpu0"`},
		"bare prefix":       {in: "lpu", wantErr: `"lpu"`},
		"duplicate":         {in: "lpu1,lpu2,lpu1", wantErr: `devices element 2 "lpu1" duplicates element 0`},
		"duplicate in long": {in: longList(40) + ",lpu3", wantErr: `devices element 40 "lpu3" duplicates element 3`},
		"long list":         {in: longList(40), want: strings.Split(longList(40), ",")},
		"too long":          {in: strings.Repeat("lpu1,", 1000) + "lpu1", wantErr: "bytes, limit 4096"},
		"too many":          {in: strings.Repeat(",", inject.MaxIDs), wantErr: "1025 elements, limit 1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := inject.ParseIDs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseIDs(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseIDs(%q): %v", tc.in, err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("ParseIDs(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if inject.EncodeIDs(got) != tc.in {
				t.Errorf("EncodeIDs(%q) = %q, want %q", got, inject.EncodeIDs(got), tc.in)
			}
		})
	}
}

func TestParseIDsAtLimits(t *testing.T) {
	ids := make([]string, 0, inject.MaxIDs)
	for i := 0; len(inject.EncodeIDs(append(ids, device.ID(i)))) <= inject.MaxValueLen && len(ids) < inject.MaxIDs; i++ {
		ids = append(ids, device.ID(i))
	}
	got, err := inject.ParseIDs(inject.EncodeIDs(ids))
	if err != nil || len(got) != len(ids) {
		t.Fatalf("value of %d bytes, %d ids: %v", len(inject.EncodeIDs(ids)), len(ids), err)
	}
}

func longList(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = device.ID(i)
	}
	return inject.EncodeIDs(ids)
}

func TestHasReservedKey(t *testing.T) {
	tests := map[string]struct {
		in   map[string]string
		want string
	}{
		"nil":       {nil, ""},
		"unrelated": {map[string]string{"app": "x", "lpu.hyperaccel.ai": "no slash"}, ""},
		"devices":   {map[string]string{inject.AnnotationDevices: "lpu0"}, inject.AnnotationDevices},
		"any key":   {map[string]string{"lpu.hyperaccel.ai/other": "", "lpu.hyperaccel.ai/a": ""}, "lpu.hyperaccel.ai/a"},
		"prefix":    {map[string]string{inject.AnnotationPrefix: ""}, inject.AnnotationPrefix},
		"upper":     {map[string]string{"LPU.hyperaccel.ai/devices": "lpu0"}, "LPU.hyperaccel.ai/devices"},
		"mixed":     {map[string]string{"lpu.HyperAccel.AI/seal": "v2:"}, "lpu.HyperAccel.AI/seal"},
		"short":     {map[string]string{"LPU.hyperaccel.ai": "x", "L": ""}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			key, ok := inject.HasReservedKey(tc.in)
			if ok != (tc.want != "") || key != tc.want {
				t.Errorf("HasReservedKey = %q, %v; want %q", key, ok, tc.want)
			}
		})
	}
}

var idRe = regexp.MustCompile(`^lpu(0|[1-9][0-9]*)$`)

// FuzzParseIDs: on success every element is an lpuN ID, there are no
// duplicates, the limits hold and the value round-trips exactly; on failure
// the error says something.
func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"lpu0", "lpu7,lpu0,lpu1", "lpu0,,lpu1", "lpu01", "lpu1,lpu1", " lpu1", "lpu65535", "lpu65536", "", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ids, err := inject.ParseIDs(in)
		if err != nil {
			if ids != nil || err.Error() == "" {
				t.Fatalf("ParseIDs(%q) = %q, %v", in, ids, err)
			}
			return
		}
		if len(ids) == 0 || len(ids) > inject.MaxIDs || len(in) > inject.MaxValueLen {
			t.Fatalf("ParseIDs(%q): %d ids from %d bytes", in, len(ids), len(in))
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if !idRe.MatchString(id) {
				t.Fatalf("ParseIDs(%q) accepted %q", in, id)
			}
			if seen[id] {
				t.Fatalf("ParseIDs(%q) accepted duplicate %q", in, id)
			}
			seen[id] = true
		}
		if inject.EncodeIDs(ids) != in {
			t.Fatalf("EncodeIDs(ParseIDs(%q)) = %q", in, inject.EncodeIDs(ids))
		}
	})
}

var allocIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestNewAllocationID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := inject.NewAllocationID()
		if !allocIDRe.MatchString(id) {
			t.Fatalf("NewAllocationID() = %q, want 32 lower-case hex digits", id)
		}
		if err := inject.CheckAllocationID(id); err != nil {
			t.Fatalf("CheckAllocationID(%q): %v", id, err)
		}
		if seen[id] {
			t.Fatalf("NewAllocationID repeated %q", id)
		}
		seen[id] = true
	}
}

func TestCheckAllocationID(t *testing.T) {
	tests := map[string]struct {
		in      string
		wantErr string
	}{
		"valid":       {in: "0123456789abcdef0123456789abcdef"},
		"empty":       {in: "", wantErr: "has 0 characters, want 32"},
		"short":       {in: "0123456789abcdef", wantErr: "has 16 characters"},
		"long":        {in: strings.Repeat("a", 33), wantErr: "has 33 characters"},
		"upper":       {in: "0123456789ABCDEF0123456789abcdef", wantErr: `character 10 'A' is not lower-case hex`},
		"not hex":     {in: "0123456789abcdeg0123456789abcdef", wantErr: `character 15 'g'`},
		"newline":     {in: "0123456789abcdef0123456789abcde\n", wantErr: `character 31 '\n'`},
		"uuid dashes": {in: "01234567-89ab-cdef-0123-456789abcd", wantErr: "has 34 characters"},
		"huge":        {in: strings.Repeat("f", 1<<16), wantErr: "has 65536 characters"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := inject.CheckAllocationID(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckAllocationID(%q): %v", tc.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckAllocationID(%.40q) = %v, want error containing %q", tc.in, err, tc.wantErr)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long; a hostile value must not be echoed whole", len(err.Error()))
			}
		})
	}
}
