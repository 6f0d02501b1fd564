package inject

import (
	"maps"
	"regexp"
	"strings"
	"testing"
)

var allocIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestNewAllocationID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewAllocationID()
		if !allocIDRe.MatchString(id) {
			t.Fatalf("NewAllocationID() = %q, want 32 lower-case hex digits", id)
		}
		if err := CheckAllocationID(id); err != nil {
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
			err := CheckAllocationID(tc.in)
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

func TestAnnotationsWithID(t *testing.T) {
	k := testKey(t, 1)
	id := "00112233445566778899aabbccddeeff"
	ann, err := k.AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		AnnotationDevices:        "lpu7,lpu0,lpu1",
		AnnotationSeal:           k.Seal("lpu7,lpu0,lpu1"),
		AnnotationAllocation:     id,
		AnnotationAllocationSeal: k.SealAllocation("lpu7,lpu0,lpu1", id),
	}
	if !maps.Equal(ann, want) {
		t.Errorf("AnnotationsWithID = %v, want %v", ann, want)
	}
	// The devices and seal keys are exactly what Annotations writes, so a
	// reader that knows nothing of allocation IDs (an older lpu-nri after a
	// rollback) still opens it.
	for key, v := range k.Annotations([]string{"lpu7", "lpu0", "lpu1"}) {
		if ann[key] != v {
			t.Errorf("%s = %q, Annotations wrote %q", key, ann[key], v)
		}
	}
	if !regexp.MustCompile(`^v1:[0-9a-f]{64}$`).MatchString(ann[AnnotationAllocationSeal]) {
		t.Errorf("allocation seal %q: want v1:<64 hex>", ann[AnnotationAllocationSeal])
	}
	if ann[AnnotationAllocationSeal] == ann[AnnotationSeal] {
		t.Error("allocation seal equals the devices seal")
	}
	if ann[AnnotationAllocationSeal] == k.SealAllocation("lpu7,lpu0,lpu2", id) {
		t.Error("allocation seal ignores the devices value")
	}
	if ann[AnnotationAllocationSeal] == k.SealAllocation("lpu7,lpu0,lpu1", "f"+id[1:]) {
		t.Error("allocation seal ignores the ID")
	}
	for _, bad := range []string{"", "xyz", strings.ToUpper(id)} {
		if got, err := k.AnnotationsWithID([]string{"lpu0"}, bad); err == nil || got != nil {
			t.Errorf("AnnotationsWithID(%q) = %v, %v; want error", bad, got, err)
		}
	}
}

func TestOpenAllocation(t *testing.T) {
	k := testKey(t, 1)
	other := testKey(t, 2)
	const id = "00112233445566778899aabbccddeeff"
	const id2 = "ffeeddccbbaa99887766554433221100"
	good, err := k.AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id)
	if err != nil {
		t.Fatal(err)
	}
	otherCtr, err := k.AnnotationsWithID([]string{"lpu2", "lpu3"}, id2)
	if err != nil {
		t.Fatal(err)
	}
	legacy := k.Annotations([]string{"lpu7", "lpu0", "lpu1"})
	tests := map[string]struct {
		ann     map[string]string
		key     *Key
		want    Allocation
		wantIs  error
		wantErr string
	}{
		"with ID":             {ann: good, key: k, want: Allocation{IDs: []string{"lpu7", "lpu0", "lpu1"}, ID: id}},
		"legacy without ID":   {ann: legacy, key: k, want: Allocation{IDs: []string{"lpu7", "lpu0", "lpu1"}}},
		"extra annotations":   {ann: with(good, "io.kubernetes.pod.name", "p"), key: k, want: Allocation{IDs: []string{"lpu7", "lpu0", "lpu1"}, ID: id}},
		"no allocation":       {ann: map[string]string{"app": "x"}, key: k, wantIs: ErrNoAllocation},
		"nil":                 {ann: nil, key: k, wantIs: ErrNoAllocation},
		"forged ID":           {ann: with(good, AnnotationAllocation, id2), key: k, wantIs: ErrBadSeal, wantErr: `does not match lpu.hyperaccel.ai/allocation "ffeeddccbbaa99887766554433221100"`},
		"ID moved":            {ann: with(good, AnnotationAllocation, id2, AnnotationAllocationSeal, otherCtr[AnnotationAllocationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "does not match"},
		"ID added to legacy":  {ann: with(legacy, AnnotationAllocation, id, AnnotationAllocationSeal, good[AnnotationAllocationSeal]+"0"), key: k, wantIs: ErrBadSeal},
		"ID without seal":     {ann: with(legacy, AnnotationAllocation, id), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation-seal missing"},
		"seal without ID":     {ann: with(good, AnnotationAllocation, "<delete>"), key: k, wantIs: ErrBadSeal, wantErr: "allocation-seal present without lpu.hyperaccel.ai/allocation"},
		"ID without devices":  {ann: map[string]string{AnnotationAllocation: id, AnnotationAllocationSeal: good[AnnotationAllocationSeal]}, key: k, wantIs: ErrBadSeal, wantErr: "present without lpu.hyperaccel.ai/devices"},
		"malformed ID":        {ann: with(good, AnnotationAllocation, strings.ToUpper(id)), key: k, wantIs: ErrBadSeal, wantErr: "not lower-case hex"},
		"empty ID":            {ann: with(good, AnnotationAllocation, ""), key: k, wantIs: ErrBadSeal, wantErr: "has 0 characters"},
		"malformed ID seal":   {ann: with(good, AnnotationAllocationSeal, "v2:00"), key: k, wantIs: ErrBadSeal, wantErr: "want prefix"},
		"devices seal as ID":  {ann: with(good, AnnotationAllocationSeal, good[AnnotationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "does not match"},
		"other key":           {ann: good, key: other, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"tampered devices":    {ann: with(good, AnnotationDevices, "lpu7,lpu0"), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"devices resealed":    {ann: with(good, AnnotationDevices, "lpu7,lpu0", AnnotationSeal, k.Seal("lpu7,lpu0")), key: k, wantIs: ErrBadSeal, wantErr: "allocation-seal does not match"},
		"sealed but bad list": {ann: with(good, AnnotationDevices, "lpu1,lpu1", AnnotationSeal, k.Seal("lpu1,lpu1")), key: k, wantErr: "duplicates element 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.OpenAllocation(tc.ann)
			ids, openErr := tc.key.Open(tc.ann)
			if tc.wantIs == nil && tc.wantErr == "" {
				if err != nil {
					t.Fatalf("OpenAllocation: %v", err)
				}
				if EncodeIDs(got.IDs) != EncodeIDs(tc.want.IDs) || got.ID != tc.want.ID {
					t.Errorf("OpenAllocation = %+v, want %+v", got, tc.want)
				}
				if openErr != nil || EncodeIDs(ids) != EncodeIDs(got.IDs) {
					t.Errorf("Open = %q, %v; OpenAllocation IDs %q", ids, openErr, got.IDs)
				}
				return
			}
			if err == nil {
				t.Fatalf("OpenAllocation = %+v, want error", got)
			}
			if got.IDs != nil || got.ID != "" {
				t.Errorf("OpenAllocation returned %+v with error", got)
			}
			checkOpenErr(t, err, tc.wantIs, tc.wantErr)
		})
	}
}

// TestOpenIgnoresAllocationKeys: Open (callers that do not trace) answers
// the same with or without the allocation keys, whatever they hold.
func TestOpenIgnoresAllocationKeys(t *testing.T) {
	k := testKey(t, 1)
	base := k.Annotations([]string{"lpu3", "lpu4"})
	for name, extra := range map[string]map[string]string{
		"valid":   must(k.AnnotationsWithID([]string{"lpu3", "lpu4"}, NewAllocationID())),
		"garbage": {AnnotationAllocation: "x", AnnotationAllocationSeal: "y"},
		"ID only": {AnnotationAllocation: NewAllocationID()},
	} {
		t.Run(name, func(t *testing.T) {
			ann := maps.Clone(base)
			maps.Copy(ann, extra)
			ann[AnnotationDevices], ann[AnnotationSeal] = base[AnnotationDevices], base[AnnotationSeal]
			ids, err := k.Open(ann)
			if err != nil || EncodeIDs(ids) != "lpu3,lpu4" {
				t.Errorf("Open = %q, %v", ids, err)
			}
		})
	}
}

func must(m map[string]string, err error) map[string]string {
	if err != nil {
		panic(err)
	}
	return m
}

// TestSealAllocationVector pins the allocation seal's wire format (kubelet
// replays annotations across upgrades, so it must never change silently).
// The expected value was computed outside Go: Python's hmac over the
// documented input.
func TestSealAllocationVector(t *testing.T) {
	k := testKey(t, 1)
	got := k.SealAllocation("lpu7,lpu0,lpu1", "00112233445566778899aabbccddeeff")
	const want = "v1:e4cc75f536ba51d930be5f7896fad54ed4251f97ff8628e41934d1224e3f43ec"
	if got != want {
		t.Errorf("SealAllocation = %s, want %s", got, want)
	}
}
