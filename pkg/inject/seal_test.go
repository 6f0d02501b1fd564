package inject_test

import (
	"bytes"
	"errors"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

func testKey(t testing.TB, fill byte) *injecttest.Key {
	t.Helper()
	k, err := injecttest.NewKey(bytes.Repeat([]byte{fill}, inject.KeySize))
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
	if wantIs == nil && (errors.Is(err, inject.ErrBadSeal) || errors.Is(err, inject.ErrNoAllocation)) {
		t.Errorf("error %v should be a parse error, not a sentinel", err)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("error %q lacks %q", err, wantErr)
	}
}

// sealID is the allocation ID the seal helpers use.
const sealID = "0123456789abcdef0123456789abcdef"

// sealOf is k's devices seal of value (k bound to a node): the one writer
// seals the value EncodeIDs makes, and a one-element list is value itself.
func sealOf(k *injecttest.Key, value string) string {
	return must(k.AnnotationsWithID([]string{value}, sealID))[inject.AnnotationSeal]
}

// allocSealOf is k's allocation seal of value and allocID.
func allocSealOf(k *injecttest.Key, value, allocID string) string {
	return must(k.AnnotationsWithID([]string{value}, allocID))[inject.AnnotationAllocationSeal]
}

// TestSealConcurrent: pooled MAC states give the same seals from many
// goroutines at once (run with -race).
func TestSealConcurrent(t *testing.T) {
	k := nodeKey(t, 5, "node-a")
	want := map[string]string{}
	for i := range 16 {
		v := longList(i + 1)
		want[v] = sealOf(nodeKey(t, 5, "node-a"), v)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				for v, seal := range want {
					if got := sealOf(k, v); got != seal {
						t.Errorf("Seal(%q) = %q, want %q", v, got, seal)
						return
					}
					if _, err := k.Open(map[string]string{inject.AnnotationDevices: v, inject.AnnotationSeal: seal}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestSealFormat(t *testing.T) {
	k := nodeKey(t, 1, "node-a")
	s := sealOf(k, "lpu0,lpu1")
	if !regexp.MustCompile(`^v2:[0-9a-f]{64}$`).MatchString(s) {
		t.Errorf("seal %q: want v2:<64 hex>", s)
	}
	if sealOf(k, "lpu0,lpu1") != s {
		t.Error("seal not deterministic")
	}
	if sealOf(k, "lpu1,lpu0") == s {
		t.Error("seal ignores order")
	}
}

func TestOpen(t *testing.T) {
	k := nodeKey(t, 1, "node-a")
	other := nodeKey(t, 2, "node-a")
	full := must(k.AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, sealID))
	good := map[string]string{inject.AnnotationDevices: full[inject.AnnotationDevices], inject.AnnotationSeal: full[inject.AnnotationSeal]}
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
		key     *injecttest.Key
		want    []string
		wantIs  error
		wantErr string
	}{
		"round trip":        {ann: good, key: k, want: []string{"lpu7", "lpu0", "lpu1"}},
		"extra annotations": {ann: with(good, "io.kubernetes.pod.name", "p"), key: k, want: []string{"lpu7", "lpu0", "lpu1"}},
		"no allocation":     {ann: map[string]string{"app": "x"}, key: k, wantIs: inject.ErrNoAllocation},
		"nil annotations":   {ann: nil, key: k, wantIs: inject.ErrNoAllocation},
		"tampered value":    {ann: with(good, inject.AnnotationDevices, "lpu7,lpu0,lpu2"), key: k, wantIs: inject.ErrBadSeal, wantErr: `does not match lpu.hyperaccel.ai/devices "lpu7,lpu0,lpu2"`},
		"reordered value":   {ann: with(good, inject.AnnotationDevices, "lpu0,lpu1,lpu7"), key: k, wantIs: inject.ErrBadSeal},
		"tampered seal":     {ann: with(good, inject.AnnotationSeal, flip(good[inject.AnnotationSeal])), key: k, wantIs: inject.ErrBadSeal},
		"other key":         {ann: good, key: other, wantIs: inject.ErrBadSeal},
		"missing seal":      {ann: with(good, inject.AnnotationSeal, "<delete>"), key: k, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal missing"},
		"seal only":         {ann: with(good, inject.AnnotationDevices, "<delete>"), key: k, wantIs: inject.ErrBadSeal, wantErr: "present without"},
		"empty seal":        {ann: with(good, inject.AnnotationSeal, ""), key: k, wantIs: inject.ErrBadSeal, wantErr: "want prefix"},
		"no version":        {ann: with(good, inject.AnnotationSeal, strings.TrimPrefix(good[inject.AnnotationSeal], "v2:")), key: k, wantIs: inject.ErrBadSeal, wantErr: "want prefix"},
		"v1 seal":           {ann: k.AnnotationsV1([]string{"lpu7", "lpu0", "lpu1"}), key: k, wantIs: inject.ErrLegacySeal, wantErr: "no longer accepted"},
		"upper hex":         {ann: with(good, inject.AnnotationSeal, strings.ToUpper(good[inject.AnnotationSeal][:3])+strings.ToUpper(good[inject.AnnotationSeal][3:])), key: k, wantIs: inject.ErrBadSeal},
		"short seal":        {ann: with(good, inject.AnnotationSeal, good[inject.AnnotationSeal][:40]), key: k, wantIs: inject.ErrBadSeal, wantErr: "hex digits, want 64"},
		"sealed but bad":    {ann: map[string]string{inject.AnnotationDevices: "lpu1,lpu1", inject.AnnotationSeal: sealOf(k, "lpu1,lpu1")}, key: k, wantErr: `duplicates element 0`},
		"sealed empty":      {ann: map[string]string{inject.AnnotationDevices: "", inject.AnnotationSeal: sealOf(k, "")}, key: k, wantErr: "devices value is empty"},
		"huge value":        {ann: map[string]string{inject.AnnotationDevices: strings.Repeat("x", inject.MaxValueLen+1), inject.AnnotationSeal: "v2:"}, key: k, wantErr: "limit 4096"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.Open(tc.ann)
			if tc.wantIs == nil && tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if inject.EncodeIDs(got) != inject.EncodeIDs(tc.want) {
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

// FuzzOpen: Open accepts a value only with the right seal, and then only a
// value ParseIDs accepts; a value sealed with the key always opens to
// exactly its IDs. Open ignores the allocation ID keys. OpenAllocation
// accepts only what Open accepts, with both allocation keys: a well-formed
// ID whose seal matches the ID and the devices value; a properly sealed ID
// always opens to itself.
func FuzzOpen(f *testing.F) {
	k := nodeKey(f, 7, "node-a")
	const id = "00112233445566778899aabbccddeeff"
	f.Add("lpu7,lpu0,lpu1", sealOf(k, "lpu7,lpu0,lpu1"), true, id, allocSealOf(k, "lpu7,lpu0,lpu1", id), uint8(3))
	f.Add("lpu7,lpu0,lpu1", sealOf(k, "lpu7,lpu0,lpu1"), true, id, allocSealOf(k, "lpu7,lpu0", id), uint8(3))
	f.Add("lpu7,lpu0,lpu1", k.SealV1("lpu7,lpu0,lpu1"), true, id, k.SealAllocationV1("lpu7,lpu0,lpu1", id), uint8(3))
	f.Add("lpu1,lpu1", sealOf(k, "lpu1,lpu1"), true, "", "", uint8(0))
	f.Add("lpu0", "v2:00", false, "zz", "v2:00", uint8(1))
	f.Add("", "", false, "", "", uint8(2))
	f.Fuzz(func(t *testing.T, value, seal string, hasSeal bool, allocID, allocSeal string, allocKeys uint8) {
		ann := map[string]string{inject.AnnotationDevices: value}
		if hasSeal {
			ann[inject.AnnotationSeal] = seal
		}
		bare := maps.Clone(ann)
		if allocKeys&1 != 0 {
			ann[inject.AnnotationAllocation] = allocID
		}
		if allocKeys&2 != 0 {
			ann[inject.AnnotationAllocationSeal] = allocSeal
		}
		ids, err := k.Open(ann)
		bareIDs, bareErr := k.Open(bare)
		if inject.EncodeIDs(ids) != inject.EncodeIDs(bareIDs) || (err == nil) != (bareErr == nil) || (err != nil && err.Error() != bareErr.Error()) {
			t.Fatalf("Open depends on allocation keys: %q, %v vs %q, %v", ids, err, bareIDs, bareErr)
		}
		if err == nil {
			if !hasSeal || seal != sealOf(k, value) {
				t.Fatalf("Open accepted %q with seal %q (want %q)", value, seal, sealOf(k, value))
			}
			if _, perr := inject.ParseIDs(value); perr != nil || inject.EncodeIDs(ids) != value {
				t.Fatalf("Open(%q) = %q but ParseIDs: %v", value, ids, perr)
			}
		} else if errors.Is(err, inject.ErrNoAllocation) {
			t.Fatalf("ErrNoAllocation with a devices key: %v", err)
		}

		alloc, aerr := k.OpenAllocation(ann)
		switch {
		case aerr == nil:
			if err != nil || inject.EncodeIDs(alloc.IDs) != inject.EncodeIDs(ids) {
				t.Fatalf("OpenAllocation = %+v but Open = %q, %v", alloc, ids, err)
			}
			if allocKeys&3 != 3 || alloc.ID != allocID || !allocIDRe.MatchString(allocID) || allocSeal != allocSealOf(k, value, allocID) {
				t.Fatalf("OpenAllocation accepted ID %q seal %q (keys %d) for %q", allocID, allocSeal, allocKeys&3, value)
			}
		case err == nil && !errors.Is(aerr, inject.ErrBadSeal):
			t.Fatalf("OpenAllocation refused an ID without ErrBadSeal: %v", aerr)
		}

		// The right seal always opens a parseable value.
		ann[inject.AnnotationSeal] = sealOf(k, value)
		ids, err = k.Open(ann)
		if _, perr := inject.ParseIDs(value); (perr == nil) != (err == nil) {
			t.Fatalf("sealed %q: Open err %v, ParseIDs err %v", value, err, perr)
		}
		if err == nil && inject.EncodeIDs(ids) != value {
			t.Fatalf("sealed %q opened to %q", value, ids)
		}
		// A well-formed ID sealed with the key always opens to itself.
		if err == nil && inject.CheckAllocationID(allocID) == nil {
			ann[inject.AnnotationAllocation], ann[inject.AnnotationAllocationSeal] = allocID, allocSealOf(k, value, allocID)
			alloc, aerr = k.OpenAllocation(ann)
			if aerr != nil || alloc.ID != allocID || inject.EncodeIDs(alloc.IDs) != value {
				t.Fatalf("sealed ID %q for %q: OpenAllocation = %+v, %v", allocID, value, alloc, aerr)
			}
		}
	})
}

// nodeKey returns testKey(fill) bound to node.
func nodeKey(t testing.TB, fill byte, node string) *injecttest.Key {
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
	if len(ann) != 4 || ann[inject.AnnotationDevices] != "lpu7,lpu0,lpu1" || ann[inject.AnnotationAllocation] != id {
		t.Errorf("AnnotationsWithID = %v", ann)
	}
	v2 := regexp.MustCompile(`^v2:[0-9a-f]{64}$`)
	for _, key := range []string{inject.AnnotationSeal, inject.AnnotationAllocationSeal} {
		if !v2.MatchString(ann[key]) {
			t.Errorf("%s = %q: want v2:<64 hex>", key, ann[key])
		}
	}
	if ann[inject.AnnotationAllocationSeal] == ann[inject.AnnotationSeal] {
		t.Error("allocation seal equals the devices seal")
	}
	legacy := must(k.AnnotationsV1WithID([]string{"lpu7", "lpu0", "lpu1"}, id))
	if legacy[inject.AnnotationSeal] == ann[inject.AnnotationSeal] || legacy[inject.AnnotationAllocationSeal] == ann[inject.AnnotationAllocationSeal] {
		t.Error("v2 seals equal the v1 seals: the node is not covered")
	}
	onB := must(nodeKey(t, 1, "node-b").AnnotationsWithID([]string{"lpu7", "lpu0", "lpu1"}, id))
	if onB[inject.AnnotationSeal] == ann[inject.AnnotationSeal] || onB[inject.AnnotationAllocationSeal] == ann[inject.AnnotationAllocationSeal] {
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
	legacy := k.AnnotationsV1(ids)
	legacyID := must(k.AnnotationsV1WithID(ids, id))
	tests := map[string]struct {
		ann     map[string]string
		key     *injecttest.Key
		want    inject.Allocation
		wantIs  error
		wantErr string
	}{
		"v2":                    {ann: good, key: k, want: inject.Allocation{IDs: ids, ID: id}},
		"v1 without ID":         {ann: legacy, key: k, wantIs: inject.ErrLegacySeal, wantErr: "lpu.hyperaccel.ai/seal: v1 seal"},
		"v1 with ID":            {ann: legacyID, key: k, wantIs: inject.ErrLegacySeal, wantErr: "lpu.hyperaccel.ai/seal: v1 seal"},
		"v1 on unbound key":     {ann: legacyID, key: testKey(t, 1), wantIs: inject.ErrLegacySeal},
		"extra annotations":     {ann: with(good, "io.kubernetes.pod.name", "p"), key: k, want: inject.Allocation{IDs: ids, ID: id}},
		"no allocation":         {ann: map[string]string{"app": "x"}, key: k, wantIs: inject.ErrNoAllocation},
		"nil":                   {ann: nil, key: k, wantIs: inject.ErrNoAllocation},
		"other node":            {ann: good, key: otherNode, wantIs: inject.ErrBadSeal, wantErr: `on node "node-b" (sealed on another node, or forged)`},
		"v2 on unbound key":     {ann: good, key: testKey(t, 1), wantIs: inject.ErrBadSeal, wantErr: "this key has no node name"},
		"v2 without ID":         {ann: with(good, inject.AnnotationAllocation, "<delete>", inject.AnnotationAllocationSeal, "<delete>"), key: k, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation missing"},
		"forged ID":             {ann: with(good, inject.AnnotationAllocation, id2), key: k, wantIs: inject.ErrBadSeal, wantErr: `does not match lpu.hyperaccel.ai/allocation "ffeeddccbbaa99887766554433221100"`},
		"ID moved":              {ann: with(good, inject.AnnotationAllocation, id2, inject.AnnotationAllocationSeal, otherCtr[inject.AnnotationAllocationSeal]), key: k, wantIs: inject.ErrBadSeal, wantErr: "does not match"},
		"v1 allocation seal":    {ann: with(good, inject.AnnotationAllocationSeal, legacyID[inject.AnnotationAllocationSeal]), key: k, wantIs: inject.ErrLegacySeal, wantErr: "allocation-seal: v1 seal"},
		"v2 seal on v1 devices": {ann: with(legacyID, inject.AnnotationAllocationSeal, good[inject.AnnotationAllocationSeal]), key: k, wantIs: inject.ErrLegacySeal, wantErr: "lpu.hyperaccel.ai/seal: v1 seal"},
		"ID added to legacy":    {ann: with(legacy, inject.AnnotationAllocation, id, inject.AnnotationAllocationSeal, legacyID[inject.AnnotationAllocationSeal]+"0"), key: k, wantIs: inject.ErrBadSeal},
		"ID without seal":       {ann: with(good, inject.AnnotationAllocationSeal, "<delete>"), key: k, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation-seal missing"},
		"seal without ID":       {ann: with(good, inject.AnnotationAllocation, "<delete>"), key: k, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/allocation missing"},
		"ID without devices":    {ann: map[string]string{inject.AnnotationAllocation: id, inject.AnnotationAllocationSeal: good[inject.AnnotationAllocationSeal]}, key: k, wantIs: inject.ErrBadSeal, wantErr: "present without lpu.hyperaccel.ai/devices"},
		"malformed ID":          {ann: with(good, inject.AnnotationAllocation, strings.ToUpper(id)), key: k, wantIs: inject.ErrBadSeal, wantErr: "not lower-case hex"},
		"empty ID":              {ann: with(good, inject.AnnotationAllocation, ""), key: k, wantIs: inject.ErrBadSeal, wantErr: "has 0 characters"},
		"malformed ID seal":     {ann: with(good, inject.AnnotationAllocationSeal, "v3:00"), key: k, wantIs: inject.ErrBadSeal, wantErr: "want prefix"},
		"devices seal as ID":    {ann: with(good, inject.AnnotationAllocationSeal, good[inject.AnnotationSeal]), key: k, wantIs: inject.ErrBadSeal, wantErr: "does not match"},
		"other key":             {ann: good, key: other, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"tampered devices":      {ann: with(good, inject.AnnotationDevices, "lpu7,lpu0"), key: k, wantIs: inject.ErrBadSeal, wantErr: "lpu.hyperaccel.ai/seal does not match"},
		"devices resealed":      {ann: with(good, inject.AnnotationDevices, "lpu7,lpu0", inject.AnnotationSeal, must(k.AnnotationsWithID([]string{"lpu7", "lpu0"}, id2))[inject.AnnotationSeal]), key: k, wantIs: inject.ErrBadSeal, wantErr: "allocation-seal does not match"},
		"sealed but bad list":   {ann: must(k.AnnotationsWithID([]string{"lpu1", "lpu1"}, id)), key: k, wantErr: "duplicates element 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.OpenAllocation(tc.ann)
			ids, openErr := tc.key.Open(tc.ann)
			if tc.wantIs == nil && tc.wantErr == "" {
				if err != nil {
					t.Fatalf("OpenAllocation: %v", err)
				}
				if inject.EncodeIDs(got.IDs) != inject.EncodeIDs(tc.want.IDs) || got.ID != tc.want.ID {
					t.Errorf("OpenAllocation = %+v, want %+v", got, tc.want)
				}
				if openErr != nil || inject.EncodeIDs(ids) != inject.EncodeIDs(got.IDs) {
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
	base := must(k.AnnotationsWithID([]string{"lpu3", "lpu4"}, inject.NewAllocationID()))
	for name, extra := range map[string]map[string]string{
		"valid":   must(k.AnnotationsWithID([]string{"lpu3", "lpu4"}, inject.NewAllocationID())),
		"garbage": {inject.AnnotationAllocation: "x", inject.AnnotationAllocationSeal: "y"},
		"ID only": {inject.AnnotationAllocation: inject.NewAllocationID()},
	} {
		t.Run(name, func(t *testing.T) {
			ann := maps.Clone(base)
			maps.Copy(ann, extra)
			ann[inject.AnnotationDevices], ann[inject.AnnotationSeal] = base[inject.AnnotationDevices], base[inject.AnnotationSeal]
			ids, err := k.Open(ann)
			if err != nil || inject.EncodeIDs(ids) != "lpu3,lpu4" {
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

// TestLegacySealVectorRefused: a v1 allocation as device plugins before
// node binding wrote it, with MACs that match under the node's key, is
// refused with ErrLegacySeal (and ErrBadSeal), bound key or not. The v1
// seal was computed outside Go (Python's hmac over the documented v1
// input), so injecttest's writer is pinned to what those plugins wrote.
func TestLegacySealVectorRefused(t *testing.T) {
	k := testKey(t, 1)
	const id = "00112233445566778899aabbccddeeff"
	got := k.SealAllocationV1("lpu7,lpu0,lpu1", id)
	const want = "v1:e4cc75f536ba51d930be5f7896fad54ed4251f97ff8628e41934d1224e3f43ec"
	if got != want {
		t.Errorf("SealAllocationV1 = %s, want %s", got, want)
	}
	ann := with(k.AnnotationsV1([]string{"lpu7", "lpu0", "lpu1"}), inject.AnnotationAllocation, id, inject.AnnotationAllocationSeal, want)
	for name, key := range map[string]*injecttest.Key{"unbound": k, "bound": nodeKey(t, 1, "node-a")} {
		a, err := key.OpenAllocation(ann)
		if !errors.Is(err, inject.ErrLegacySeal) || !errors.Is(err, inject.ErrBadSeal) {
			t.Errorf("%s key: OpenAllocation of a v1 allocation = %+v, %v; want ErrLegacySeal and ErrBadSeal", name, a, err)
		}
		if _, err := key.Open(ann); !errors.Is(err, inject.ErrLegacySeal) {
			t.Errorf("%s key: Open of a v1 allocation = %v; want ErrLegacySeal", name, err)
		}
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
	if ann[inject.AnnotationSeal] != wantSeal {
		t.Errorf("devices seal = %s, want %s", ann[inject.AnnotationSeal], wantSeal)
	}
	if ann[inject.AnnotationAllocationSeal] != wantAlloc {
		t.Errorf("allocation seal = %s, want %s", ann[inject.AnnotationAllocationSeal], wantAlloc)
	}
	if got := k.Fingerprint(); got != wantFP {
		t.Errorf("Fingerprint = %s, want %s", got, wantFP)
	}
}

// FuzzOpenAllocationV2 feeds arbitrary four-annotation sets to a key bound
// to node-a. Invariants: no panic; a v2 result carries an ID and exactly
// the seals AnnotationsWithID makes for it on node-a; the same annotations
// never open for node-b (same secret).
func FuzzOpenAllocationV2(f *testing.F) {
	a := nodeKey(f, 7, "node-a")
	b := nodeKey(f, 7, "node-b")
	const id = "00112233445566778899aabbccddeeff"
	good := must(a.AnnotationsWithID([]string{"lpu7", "lpu0"}, id))
	f.Add(good[inject.AnnotationDevices], good[inject.AnnotationSeal], good[inject.AnnotationAllocation], good[inject.AnnotationAllocationSeal])
	legacy := must(a.AnnotationsV1WithID([]string{"lpu1"}, id))
	f.Add(legacy[inject.AnnotationDevices], legacy[inject.AnnotationSeal], legacy[inject.AnnotationAllocation], legacy[inject.AnnotationAllocationSeal])
	f.Add("lpu0", "v2:00", "zz", "v2:")
	f.Fuzz(func(t *testing.T, value, seal, allocID, allocSeal string) {
		ann := map[string]string{inject.AnnotationDevices: value, inject.AnnotationSeal: seal, inject.AnnotationAllocation: allocID, inject.AnnotationAllocationSeal: allocSeal}
		got, err := a.OpenAllocation(ann)
		if err != nil {
			return
		}
		want, werr := a.AnnotationsWithID([]string{value}, allocID)
		if werr != nil || got.ID != allocID || want[inject.AnnotationSeal] != seal || want[inject.AnnotationAllocationSeal] != allocSeal {
			t.Fatalf("opened for seals that AnnotationsWithID does not make: %v", ann)
		}
		if other, err := b.OpenAllocation(ann); err == nil {
			t.Fatalf("node-a's annotations opened on node-b: %+v", other)
		}
	})
}

// BenchmarkOpen: verifying and parsing an 8-LPU allocation annotation.
func BenchmarkOpen(b *testing.B) {
	k := nodeKey(b, 3, "node-a")
	ann := must(k.AnnotationsWithID([]string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}, sealID))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Open(ann); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAllocation: verifying and parsing an 8-LPU allocation with
// its allocation ID (lpu-nri with tracing).
func BenchmarkOpenAllocation(b *testing.B) {
	k := nodeKey(b, 3, "node-a") // AnnotationsWithID needs a node
	ann, err := k.AnnotationsWithID([]string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}, inject.NewAllocationID())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if a, err := k.OpenAllocation(ann); err != nil || a.ID == "" {
			b.Fatal(a, err)
		}
	}
}

// BenchmarkAnnotationsWithID: sealing an 8-LPU allocation and a fresh
// allocation ID (the device plugin's Allocate with tracing).
func BenchmarkAnnotationsWithID(b *testing.B) {
	k := nodeKey(b, 3, "node-a") // AnnotationsWithID needs a node
	ids := []string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.AnnotationsWithID(ids, inject.NewAllocationID()); err != nil {
			b.Fatal(err)
		}
	}
}
