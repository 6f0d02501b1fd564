package inject

import (
	"bytes"
	"errors"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func testKey(t testing.TB, fill byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{fill}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// with returns a copy of annotations m with the pairs kv set; the value
// "<delete>" removes its key instead.
func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<delete>" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// checkOpenErr checks an error of Open or OpenAllocation against a table
// row: it wraps wantIs (when wantIs is nil, neither sentinel: a parse
// error) and its text contains wantErr.
func checkOpenErr(t *testing.T, err, wantIs error, wantErr string) {
	t.Helper()
	if wantIs != nil && !errors.Is(err, wantIs) {
		t.Errorf("error %v is not %v", err, wantIs)
	}
	if wantIs == nil && (errors.Is(err, ErrBadSeal) || errors.Is(err, ErrNoAllocation)) {
		t.Errorf("error %v should be a parse error, not a sentinel", err)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("error %q lacks %q", err, wantErr)
	}
}

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
		"too many":          {in: strings.Repeat(",", MaxIDs), wantErr: "1025 elements, limit 1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIDs(tc.in)
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
			if EncodeIDs(got) != tc.in {
				t.Errorf("EncodeIDs(%q) = %q, want %q", got, EncodeIDs(got), tc.in)
			}
		})
	}
}

func TestParseIDsAtLimits(t *testing.T) {
	ids := make([]string, 0, MaxIDs)
	for i := 0; len(EncodeIDs(append(ids, device.ID(i)))) <= MaxValueLen && len(ids) < MaxIDs; i++ {
		ids = append(ids, device.ID(i))
	}
	got, err := ParseIDs(EncodeIDs(ids))
	if err != nil || len(got) != len(ids) {
		t.Fatalf("value of %d bytes, %d ids: %v", len(EncodeIDs(ids)), len(ids), err)
	}
}

func longList(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = device.ID(i)
	}
	return EncodeIDs(ids)
}

// TestSealConcurrent: pooled MAC states give the same seals from many
// goroutines at once (run with -race).
func TestSealConcurrent(t *testing.T) {
	k := testKey(t, 5)
	want := map[string]string{}
	for i := range 16 {
		v := longList(i + 1)
		want[v] = testKey(t, 5).Seal(v)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				for v, seal := range want {
					if got := k.Seal(v); got != seal {
						t.Errorf("Seal(%q) = %q, want %q", v, got, seal)
						return
					}
					if _, err := k.Open(map[string]string{AnnotationDevices: v, AnnotationSeal: seal}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestHasReservedKey(t *testing.T) {
	tests := map[string]struct {
		in   map[string]string
		want string
	}{
		"nil":       {nil, ""},
		"unrelated": {map[string]string{"app": "x", "lpu.hyperaccel.ai": "no slash"}, ""},
		"devices":   {map[string]string{AnnotationDevices: "lpu0"}, AnnotationDevices},
		"any key":   {map[string]string{"lpu.hyperaccel.ai/other": "", "lpu.hyperaccel.ai/a": ""}, "lpu.hyperaccel.ai/a"},
		"prefix":    {map[string]string{AnnotationPrefix: ""}, AnnotationPrefix},
		"upper":     {map[string]string{"LPU.hyperaccel.ai/devices": "lpu0"}, "LPU.hyperaccel.ai/devices"},
		"mixed":     {map[string]string{"lpu.HyperAccel.AI/seal": "v2:"}, "lpu.HyperAccel.AI/seal"},
		"short":     {map[string]string{"LPU.hyperaccel.ai": "x", "L": ""}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			key, ok := HasReservedKey(tc.in)
			if ok != (tc.want != "") || key != tc.want {
				t.Errorf("HasReservedKey = %q, %v; want %q", key, ok, tc.want)
			}
		})
	}
}

func TestSealFormat(t *testing.T) {
	k := testKey(t, 1)
	s := k.Seal("lpu0,lpu1")
	if !regexp.MustCompile(`^v1:[0-9a-f]{64}$`).MatchString(s) {
		t.Errorf("seal %q: want v1:<64 hex>", s)
	}
	if k.Seal("lpu0,lpu1") != s {
		t.Error("seal not deterministic")
	}
	if k.Seal("lpu1,lpu0") == s {
		t.Error("seal ignores order")
	}
}

func TestOpen(t *testing.T) {
	k := testKey(t, 1)
	other := testKey(t, 2)
	good := k.Annotations([]string{"lpu7", "lpu0", "lpu1"})
	sealOf := func(value string) string { return k.Seal(value) }
	flip := func(s string) string { // change the last hex digit
		b := []byte(s)
		if b[len(b)-1] == '0' {
			b[len(b)-1] = '1'
		} else {
			b[len(b)-1] = '0'
		}
		return string(b)
	}
	tests := map[string]struct {
		ann     map[string]string
		key     *Key
		want    []string
		wantIs  error
		wantErr string
	}{
		"round trip":        {ann: good, key: k, want: []string{"lpu7", "lpu0", "lpu1"}},
		"extra annotations": {ann: with(good, "io.kubernetes.pod.name", "p"), key: k, want: []string{"lpu7", "lpu0", "lpu1"}},
		"no allocation":     {ann: map[string]string{"app": "x"}, key: k, wantIs: ErrNoAllocation},
		"nil annotations":   {ann: nil, key: k, wantIs: ErrNoAllocation},
		"tampered value":    {ann: with(good, AnnotationDevices, "lpu7,lpu0,lpu2"), key: k, wantIs: ErrBadSeal, wantErr: `does not match lpu.hyperaccel.ai/devices "lpu7,lpu0,lpu2"`},
		"reordered value":   {ann: with(good, AnnotationDevices, "lpu0,lpu1,lpu7"), key: k, wantIs: ErrBadSeal},
		"tampered seal":     {ann: with(good, AnnotationSeal, flip(good[AnnotationSeal])), key: k, wantIs: ErrBadSeal},
		"other key":         {ann: good, key: other, wantIs: ErrBadSeal},
		"missing seal":      {ann: with(good, AnnotationSeal, "<delete>"), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal missing"},
		"seal only":         {ann: with(good, AnnotationDevices, "<delete>"), key: k, wantIs: ErrBadSeal, wantErr: "present without"},
		"empty seal":        {ann: with(good, AnnotationSeal, ""), key: k, wantIs: ErrBadSeal, wantErr: "want prefix"},
		"no version":        {ann: with(good, AnnotationSeal, strings.TrimPrefix(good[AnnotationSeal], "v1:")), key: k, wantIs: ErrBadSeal, wantErr: "want prefix"},
		"upper hex":         {ann: with(good, AnnotationSeal, strings.ToUpper(good[AnnotationSeal][:3])+strings.ToUpper(good[AnnotationSeal][3:])), key: k, wantIs: ErrBadSeal},
		"short seal":        {ann: with(good, AnnotationSeal, good[AnnotationSeal][:40]), key: k, wantIs: ErrBadSeal, wantErr: "hex digits, want 64"},
		"sealed but bad":    {ann: map[string]string{AnnotationDevices: "lpu1,lpu1", AnnotationSeal: sealOf("lpu1,lpu1")}, key: k, wantErr: `duplicates element 0`},
		"sealed empty":      {ann: map[string]string{AnnotationDevices: "", AnnotationSeal: sealOf("")}, key: k, wantErr: "devices value is empty"},
		"huge value":        {ann: map[string]string{AnnotationDevices: strings.Repeat("x", MaxValueLen+1), AnnotationSeal: "v1:"}, key: k, wantErr: "limit 4096"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.Open(tc.ann)
			if tc.wantIs == nil && tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if EncodeIDs(got) != EncodeIDs(tc.want) {
					t.Errorf("Open = %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open = %q, want error", got)
			}
			if got != nil {
				t.Errorf("Open returned IDs %q with error", got)
			}
			checkOpenErr(t, err, tc.wantIs, tc.wantErr)
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
		ids, err := ParseIDs(in)
		if err != nil {
			if ids != nil || err.Error() == "" {
				t.Fatalf("ParseIDs(%q) = %q, %v", in, ids, err)
			}
			return
		}
		if len(ids) == 0 || len(ids) > MaxIDs || len(in) > MaxValueLen {
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
		if EncodeIDs(ids) != in {
			t.Fatalf("EncodeIDs(ParseIDs(%q)) = %q", in, EncodeIDs(ids))
		}
	})
}

// FuzzOpen: Open accepts a value only with the right seal, and then only a
// value ParseIDs accepts; a value sealed with the key always opens to
// exactly its IDs. Open ignores the allocation ID keys. OpenAllocation
// accepts exactly what Open accepts when no allocation key is present (ID
// ""), and otherwise only a well-formed ID whose seal matches the ID and the
// devices value; a properly sealed ID always opens to itself.
func FuzzOpen(f *testing.F) {
	k := testKey(f, 7)
	const id = "00112233445566778899aabbccddeeff"
	f.Add("lpu7,lpu0,lpu1", k.Seal("lpu7,lpu0,lpu1"), true, id, k.SealAllocation("lpu7,lpu0,lpu1", id), uint8(3))
	f.Add("lpu7,lpu0,lpu1", k.Seal("lpu7,lpu0,lpu1"), true, id, k.SealAllocation("lpu7,lpu0", id), uint8(3))
	f.Add("lpu1,lpu1", k.Seal("lpu1,lpu1"), true, "", "", uint8(0))
	f.Add("lpu0", "v1:00", false, "zz", "v1:00", uint8(1))
	f.Add("", "", false, "", "", uint8(2))
	f.Fuzz(func(t *testing.T, value, seal string, hasSeal bool, allocID, allocSeal string, allocKeys uint8) {
		ann := map[string]string{AnnotationDevices: value}
		if hasSeal {
			ann[AnnotationSeal] = seal
		}
		bare := maps.Clone(ann)
		if allocKeys&1 != 0 {
			ann[AnnotationAllocation] = allocID
		}
		if allocKeys&2 != 0 {
			ann[AnnotationAllocationSeal] = allocSeal
		}
		ids, err := k.Open(ann)
		bareIDs, bareErr := k.Open(bare)
		if EncodeIDs(ids) != EncodeIDs(bareIDs) || (err == nil) != (bareErr == nil) || (err != nil && err.Error() != bareErr.Error()) {
			t.Fatalf("Open depends on allocation keys: %q, %v vs %q, %v", ids, err, bareIDs, bareErr)
		}
		if err == nil {
			if !hasSeal || seal != k.Seal(value) {
				t.Fatalf("Open accepted %q with seal %q (want %q)", value, seal, k.Seal(value))
			}
			if _, perr := ParseIDs(value); perr != nil || EncodeIDs(ids) != value {
				t.Fatalf("Open(%q) = %q but ParseIDs: %v", value, ids, perr)
			}
		} else if errors.Is(err, ErrNoAllocation) {
			t.Fatalf("ErrNoAllocation with a devices key: %v", err)
		}

		alloc, aerr := k.OpenAllocation(ann)
		switch {
		case aerr == nil:
			if err != nil || EncodeIDs(alloc.IDs) != EncodeIDs(ids) {
				t.Fatalf("OpenAllocation = %+v but Open = %q, %v", alloc, ids, err)
			}
			if allocKeys&3 == 0 && alloc.ID != "" {
				t.Fatalf("OpenAllocation invented ID %q", alloc.ID)
			}
			if allocKeys&3 != 0 {
				if allocKeys&3 != 3 || alloc.ID != allocID || !allocIDRe.MatchString(allocID) || allocSeal != k.SealAllocation(value, allocID) {
					t.Fatalf("OpenAllocation accepted ID %q seal %q (keys %d) for %q", allocID, allocSeal, allocKeys&3, value)
				}
			}
		case err == nil && allocKeys&3 == 0:
			t.Fatalf("OpenAllocation refused what Open accepts, without allocation keys: %v", aerr)
		case err == nil && !errors.Is(aerr, ErrBadSeal):
			t.Fatalf("OpenAllocation refused an ID without ErrBadSeal: %v", aerr)
		}

		// The right seal always opens a parseable value.
		ann[AnnotationSeal] = k.Seal(value)
		ids, err = k.Open(ann)
		if _, perr := ParseIDs(value); (perr == nil) != (err == nil) {
			t.Fatalf("sealed %q: Open err %v, ParseIDs err %v", value, err, perr)
		}
		if err == nil && EncodeIDs(ids) != value {
			t.Fatalf("sealed %q opened to %q", value, ids)
		}
		// A well-formed ID sealed with the key always opens to itself.
		if err == nil && CheckAllocationID(allocID) == nil {
			ann[AnnotationAllocation], ann[AnnotationAllocationSeal] = allocID, k.SealAllocation(value, allocID)
			alloc, aerr = k.OpenAllocation(ann)
			if aerr != nil || alloc.ID != allocID || EncodeIDs(alloc.IDs) != value {
				t.Fatalf("sealed ID %q for %q: OpenAllocation = %+v, %v", allocID, value, alloc, aerr)
			}
		}
	})
}
