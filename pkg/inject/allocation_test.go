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

// nodeKey returns testKey(fill) bound to node.
func nodeKey(t testing.TB, fill byte, node string) *Key {
	t.Helper()
	k, err := testKey(t, fill).ForNode(node)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAnnotationsWithID(t *testing.T) {
	k := nodeKey(t, 1, "node-a")
	id := "00112233445566778899aabbccddeeff"
	ann, err := k.AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ann) != 4 || ann[AnnotationDevices] != "lpu7,lpu0,lpu1" || ann[AnnotationAllocation] != id {
		t.Errorf("AnnotationsWithID = %v", ann)
	}
	v2 := regexp.MustCompile(`^v2:[0-9a-f]{64}$`)
	for _, key := range []string{AnnotationSeal, AnnotationAllocationSeal} {
		if !v2.MatchString(ann[key]) {
			t.Errorf("%s = %q: want v2:<64 hex>", key, ann[key])
		}
	}
	if ann[AnnotationAllocationSeal] == ann[AnnotationSeal] {
		t.Error("allocation seal equals the devices seal")
	}
	legacy := must(k.LegacyAnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id))
	if legacy[AnnotationSeal] == ann[AnnotationSeal] || legacy[AnnotationAllocationSeal] == ann[AnnotationAllocationSeal] {
		t.Error("v2 seals equal the v1 seals: the node is not covered")
	}
	onB := must(nodeKey(t, 1, "node-b").AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id))
	if onB[AnnotationSeal] == ann[AnnotationSeal] || onB[AnnotationAllocationSeal] == ann[AnnotationAllocationSeal] {
		t.Error("seals on node-b equal those on node-a")
	}
	for _, bad := range []string{"", "xyz", strings.ToUpper(id)} {
		if got, err := k.AnnotationsWithID([]string{"lpu0"}, bad); err == nil || got != nil {
			t.Errorf("AnnotationsWithID(%q) = %v, %v; want error", bad, got, err)
		}
	}
	if got, err := testKey(t, 1).AnnotationsWithID([]string{"lpu0"}, id); err == nil || got != nil || !strings.Contains(err.Error(), "no node name") {
		t.Errorf("AnnotationsWithID on an unbound key = %v, %v; want a node name error", got, err)
	}
}

func TestForNode(t *testing.T) {
	k := testKey(t, 1)
	for _, bad := range []string{"", "a b", "a\nb", "n\x00", "ü", strings.Repeat("a", 254)} {
		if _, err := k.ForNode(bad); err == nil {
			t.Errorf("ForNode(%q) accepted", bad)
		}
	}
	b, err := k.ForNode("worker-1.example")
	if err != nil || b.Node() != "worker-1.example" || k.Node() != "" {
		t.Fatalf("ForNode = %v, %v (node %q, original %q)", b, err, b.Node(), k.Node())
	}
	if b.Fingerprint() != k.Fingerprint() {
		t.Error("the fingerprint depends on the node")
	}
	if k.Fingerprint() == testKey(t, 2).Fingerprint() {
		t.Error("two keys share a fingerprint")
	}
}

func TestOpenAllocation(t *testing.T) {
	k := nodeKey(t, 1, "node-a")
	other := nodeKey(t, 2, "node-a")
	otherNode := nodeKey(t, 1, "node-b")
	const id = "00112233445566778899aabbccddeeff"
	const id2 = "ffeeddccbbaa99887766554433221100"
	ids := []string{"lpu7", "lpu0", "lpu1"}
	good := must(k.AnnotationsWithID(ids, id))
	otherCtr := must(k.AnnotationsWithID([]string{"lpu2", "lpu3"}, id2))
	legacy := k.Annotations(ids)
	legacyID := must(k.LegacyAnnotationsWithID(ids, id))
	v2 := func(a Allocation) Allocation { a.Version = SealV2; return a }
	v1 := func(a Allocation) Allocation { a.Version = SealV1; return a }
	tests := map[string]struct {
		ann     map[string]string
		key     *Key
		want    Allocation
		wantIs  error
		wantErr string
	}{
		"v2":                    {ann: good, key: k, want: v2(Allocation{IDs: ids, ID: id})},
		"v1 without ID":         {ann: legacy, key: k, want: v1(Allocation{IDs: ids})},
		"v1 with ID":            {ann: legacyID, key: k, want: v1(Allocation{IDs: ids, ID: id})},
		"v1 on unbound key":     {ann: legacyID, key: testKey(t, 1), want: v1(Allocation{IDs: ids, ID: id})},
		"extra annotations":     {ann: with(good, "io.kubernetes.pod.name", "p"), key: k, want: v2(Allocation{IDs: ids, ID: id})},
		"no allocation":         {ann: map[string]string{"app": "x"}, key: k, wantIs: ErrNoAllocation},
		"nil":                   {ann: nil, key: k, wantIs: ErrNoAllocation},
		"other node":            {ann: good, key: otherNode, wantIs: ErrBadSeal, wantErr: `on node "node-b" (sealed on another node, or forged)`},
		"v2 on unbound key":     {ann: good, key: testKey(t, 1), wantIs: ErrBadSeal, wantErr: "this key has no node name"},
		"v2 without ID":         {ann: with(good, AnnotationAllocation, "<delete>", AnnotationAllocationSeal, "<delete>"), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation missing"},
		"forged ID":             {ann: with(good, AnnotationAllocation, id2), key: k, wantIs: ErrBadSeal, wantErr: `does not match lpu.hyperaccel.ai/allocation "ffeeddccbbaa99887766554433221100"`},
		"ID moved":              {ann: with(good, AnnotationAllocation, id2, AnnotationAllocationSeal, otherCtr[AnnotationAllocationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "does not match"},
		"v1 allocation seal":    {ann: with(good, AnnotationAllocationSeal, legacyID[AnnotationAllocationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "allocation-seal is v1 but lpu.hyperaccel.ai/seal is v2"},
		"v2 seal on v1 devices": {ann: with(legacyID, AnnotationAllocationSeal, good[AnnotationAllocationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "is v2 but lpu.hyperaccel.ai/seal is v1"},
		"ID added to legacy":    {ann: with(legacy, AnnotationAllocation, id, AnnotationAllocationSeal, legacyID[AnnotationAllocationSeal]+"0"), key: k, wantIs: ErrBadSeal},
		"ID without seal":       {ann: with(legacy, AnnotationAllocation, id), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation-seal missing"},
		"seal without ID":       {ann: with(good, AnnotationAllocation, "<delete>"), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation missing"},
		"ID without devices":    {ann: map[string]string{AnnotationAllocation: id, AnnotationAllocationSeal: good[AnnotationAllocationSeal]}, key: k, wantIs: ErrBadSeal, wantErr: "present without lpu.hyperaccel.ai/devices"},
		"malformed ID":          {ann: with(good, AnnotationAllocation, strings.ToUpper(id)), key: k, wantIs: ErrBadSeal, wantErr: "not lower-case hex"},
		"empty ID":              {ann: with(good, AnnotationAllocation, ""), key: k, wantIs: ErrBadSeal, wantErr: "has 0 characters"},
		"malformed ID seal":     {ann: with(good, AnnotationAllocationSeal, "v3:00"), key: k, wantIs: ErrBadSeal, wantErr: "want prefix"},
		"devices seal as ID":    {ann: with(good, AnnotationAllocationSeal, good[AnnotationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "does not match"},
		"other key":             {ann: good, key: other, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"tampered devices":      {ann: with(good, AnnotationDevices, "lpu7,lpu0"), key: k, wantIs: ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"devices resealed":      {ann: with(good, AnnotationDevices, "lpu7,lpu0", AnnotationSeal, must(k.AnnotationsWithID([]string{"lpu7", "lpu0"}, id2))[AnnotationSeal]), key: k, wantIs: ErrBadSeal, wantErr: "allocation-seal does not match"},
		"sealed but bad list":   {ann: with(legacy, AnnotationDevices, "lpu1,lpu1", AnnotationSeal, k.Seal("lpu1,lpu1")), key: k, wantErr: "duplicates element 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.OpenAllocation(tc.ann)
			ids, openErr := tc.key.Open(tc.ann)
			if tc.wantIs == nil && tc.wantErr == "" {
				if err != nil {
					t.Fatalf("OpenAllocation: %v", err)
				}
				if EncodeIDs(got.IDs) != EncodeIDs(tc.want.IDs) || got.ID != tc.want.ID || got.Version != tc.want.Version {
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
	k := nodeKey(t, 1, "node-a")
	base := must(k.AnnotationsWithID([]string{"lpu3", "lpu4"}, NewAllocationID()))
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

// TestSealV2Vector pins the v2 seals' and the fingerprint's wire format the
// same way: Python's hmac over the documented inputs.
func TestSealV2Vector(t *testing.T) {
	k := nodeKey(t, 1, "node-a")
	ann := must(k.AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, "00112233445566778899aabbccddeeff"))
	const (
		wantSeal  = "v2:1914b3f70a81d243048ba25c728235f007111f1fda1d8e62576105daf6117b0e"
		wantAlloc = "v2:41bffb758198cba27872012c6c5035338006ad9cff604fa0319a9213db903bbd"
		wantFP    = "ef8b8ecf8fc9d128"
	)
	if ann[AnnotationSeal] != wantSeal {
		t.Errorf("devices seal = %s, want %s", ann[AnnotationSeal], wantSeal)
	}
	if ann[AnnotationAllocationSeal] != wantAlloc {
		t.Errorf("allocation seal = %s, want %s", ann[AnnotationAllocationSeal], wantAlloc)
	}
	if got := k.Fingerprint(); got != wantFP {
		t.Errorf("Fingerprint = %s, want %s", got, wantFP)
	}
}

// FuzzOpenAllocationV2 feeds arbitrary four-annotation sets to a key bound
// to node-a. Invariants: no panic; a v2 result carries an ID and exactly
// the seals AnnotationsWithID makes for it on node-a; the same annotations
// never open as v2 for node-b (same secret); a v1 result's seals are the
// unbound v1 seals.
func FuzzOpenAllocationV2(f *testing.F) {
	a := nodeKey(f, 7, "node-a")
	b := nodeKey(f, 7, "node-b")
	const id = "00112233445566778899aabbccddeeff"
	good := must(a.AnnotationsWithID([]string{"lpu7", "lpu0"}, id))
	f.Add(good[AnnotationDevices], good[AnnotationSeal], good[AnnotationAllocation], good[AnnotationAllocationSeal])
	legacy := must(a.LegacyAnnotationsWithID([]string{"lpu1"}, id))
	f.Add(legacy[AnnotationDevices], legacy[AnnotationSeal], legacy[AnnotationAllocation], legacy[AnnotationAllocationSeal])
	f.Add("lpu0", "v2:00", "zz", "v2:")
	f.Fuzz(func(t *testing.T, value, seal, allocID, allocSeal string) {
		ann := map[string]string{AnnotationDevices: value, AnnotationSeal: seal, AnnotationAllocation: allocID, AnnotationAllocationSeal: allocSeal}
		got, err := a.OpenAllocation(ann)
		if err != nil {
			return
		}
		switch got.Version {
		case SealV2:
			want, werr := a.AnnotationsWithID([]string{value}, allocID)
			if werr != nil || got.ID != allocID || want[AnnotationSeal] != seal || want[AnnotationAllocationSeal] != allocSeal {
				t.Fatalf("v2 opened for seals that AnnotationsWithID does not make: %v", ann)
			}
			if other, err := b.OpenAllocation(ann); err == nil {
				t.Fatalf("node-a's v2 annotations opened on node-b: %+v", other)
			}
		case SealV1:
			if seal != a.Seal(value) || allocSeal != a.SealAllocation(value, allocID) {
				t.Fatalf("v1 opened for seals that are not the v1 seals: %v", ann)
			}
		default:
			t.Fatalf("version %d", got.Version)
		}
	})
}
