package devcgroup

import (
	"testing"
	"time"
)

func ptr(v int64) *int64 { return &v }

// The rules containerd writes: deny everything, then allow what the
// container was given.
var denyAll = Rule{Allow: false, Access: "rwm"}

func TestAdmitted(t *testing.T) {
	tests := map[string]struct {
		rules        []Rule
		major, minor int64
		want         Access
	}{
		"no rules":               {nil, 509, 3, 0},
		"deny all":               {[]Rule{denyAll}, 509, 3, 0},
		"allow all (privileged)": {[]Rule{{Allow: true, Access: "rwm"}}, 509, 3, All},
		"all devices allowed after deny (privileged_without_host_devices_all_devices_allowed)": {
			[]Rule{denyAll, {Allow: true, Type: "a", Access: "rwm"}}, 509, 3, All},
		"type a with numbers still resets": {
			[]Rule{denyAll, {Allow: true, Type: "a", Major: ptr(1), Minor: ptr(3), Access: "rwm"}}, 509, 3, All},
		"own node only": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(2), Access: "rw"}}, 509, 3, 0},
		"own node": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(2), Access: "rw"}}, 509, 2, Read | Write},
		"wildcard minor on the LPU major": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Access: "rwm"}}, 509, 7, All},
		"wildcard major": {
			[]Rule{denyAll, {Allow: true, Type: "c", Minor: ptr(7), Access: "r"}}, 509, 7, Read},
		"mknod only counts": {
			[]Rule{denyAll, {Allow: true, Type: "c", Access: "m"}}, 509, 7, Mknod},
		"block rule does not match": {
			[]Rule{denyAll, {Allow: true, Type: "b", Major: ptr(509), Access: "rwm"}}, 509, 7, 0},
		"unbuffered char counts as char": {
			[]Rule{denyAll, {Allow: true, Type: "u", Major: ptr(509), Minor: ptr(7), Access: "rw"}}, 509, 7, Read | Write},
		"empty access on an allow rule is everything": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(7)}}, 509, 7, All},
		"later deny of the same key wins": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Access: "rwm"}, {Allow: false, Type: "c", Major: ptr(509), Access: "rwm"}}, 509, 7, 0},
		"later deny-all wins": {
			[]Rule{{Allow: true, Access: "rwm"}, denyAll}, 509, 7, 0},
		"deny part of the access": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(7), Access: "rwm"}, {Type: "c", Major: ptr(509), Minor: ptr(7), Access: "w"}}, 509, 7, Read | Mknod},
		// cgroup v1 keeps the wildcard: the deny of one minor is ignored.
		"hole punched in a wildcard allow": {
			[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Access: "rwm"}, {Type: "c", Major: ptr(509), Minor: ptr(7), Access: "rwm"}}, 509, 7, All},
		// The eBPF filters let the later allow win over the wildcard deny.
		"allow after a wildcard deny in allow-all mode": {
			[]Rule{{Allow: true, Access: "rwm"}, {Type: "c", Major: ptr(509), Access: "rwm"}, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(7), Access: "r"}}, 509, 7, Read},
		"allow-all with a deny of the LPU major": {
			[]Rule{{Allow: true, Access: "rwm"}, {Type: "c", Major: ptr(509), Access: "rwm"}}, 509, 7, 0},
		"allow-all with a deny of another major": {
			[]Rule{{Allow: true, Access: "rwm"}, {Type: "c", Major: ptr(510), Access: "rwm"}}, 509, 7, All},
		"unknown type in an allow counts as all": {
			[]Rule{denyAll, {Allow: true, Type: "x", Access: "r"}}, 509, 7, All},
		"unknown type in a deny is ignored": {
			[]Rule{{Allow: true, Access: "rwm"}, {Type: "x", Access: "rwm"}}, 509, 7, All},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Admitted(tc.rules, tc.major, tc.minor); got != tc.want {
				t.Fatalf("Admitted(%d:%d) = %q, want %q", tc.major, tc.minor, got, tc.want)
			}
		})
	}
}

func TestAdmitsOther(t *testing.T) {
	own := []Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(2), Access: "rw"}, {Allow: true, Type: "c", Major: ptr(509), Minor: ptr(3), Access: "rw"}}
	tests := map[string]struct {
		rules  []Rule
		except []int64
		want   bool
	}{
		"own nodes only":       {own, []int64{2, 3}, false},
		"one not allocated":    {own, []int64{2}, true},
		"wildcard minor":       {[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(509), Access: "rw"}}, []int64{0, 1, 2}, true},
		"allow all":            {[]Rule{{Allow: true}}, nil, true},
		"deny all":             {[]Rule{denyAll}, nil, false},
		"other major":          {[]Rule{denyAll, {Allow: true, Type: "c", Major: ptr(1), Access: "rwm"}}, nil, false},
		"allow all but denied": {[]Rule{{Allow: true}, {Type: "c", Major: ptr(509), Access: "rwm"}}, nil, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, ok := AdmitsOther(tc.rules, 509, tc.except)
			if ok != tc.want {
				t.Fatalf("AdmitsOther = %d, %v; want %v", m, ok, tc.want)
			}
			for _, e := range tc.except {
				if ok && m == e {
					t.Fatalf("AdmitsOther returned an excepted minor %d", m)
				}
			}
		})
	}
}

func TestAccessString(t *testing.T) {
	if got := ParseAccess("mrxw").String(); got != "rwm" {
		t.Fatalf("ParseAccess(mrxw) = %q", got)
	}
}

// TestManyRules: long lists are judged in linear time up to MaxRules (the
// exceptions get an index) and answered like short ones; beyond, everything
// is admitted.
func TestManyRules(t *testing.T) {
	rules := []Rule{denyAll}
	for i := range int64(MaxRules - 3) {
		rules = append(rules, Rule{Allow: true, Type: "c", Major: ptr(1000 + i), Minor: ptr(i), Access: "rw"})
	}
	own := append(rules[:len(rules):len(rules)], Rule{Allow: true, Type: "c", Major: ptr(509), Minor: ptr(2), Access: "rw"})
	start := time.Now()
	if got := Admitted(own, 509, 3); got != 0 {
		t.Fatalf("Admitted(509:3) = %q", got)
	}
	if got := Admitted(own, 509, 2); got != Read|Write {
		t.Fatalf("Admitted(509:2) = %q", got)
	}
	if m, ok := AdmitsOther(own, 509, []int64{2}); ok {
		t.Fatalf("AdmitsOther = %d", m)
	}
	// Deny the first exception again after the index exists.
	undo := append(own[:len(own):len(own)], Rule{Type: "c", Major: ptr(509), Minor: ptr(2), Access: "rwm"})
	if got := Admitted(undo, 509, 2); got != 0 {
		t.Fatalf("after the deny, Admitted(509:2) = %q", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d rules judged in %v", len(own), d)
	}
	tooMany := append(undo, denyAll, denyAll)
	if got := Admitted(tooMany, 509, 3); got != All {
		t.Fatalf("beyond MaxRules: %q, want everything", got)
	}
	if _, ok := AdmitsOther(tooMany, 509, []int64{0, 1}); !ok {
		t.Fatal("beyond MaxRules: AdmitsOther says none")
	}
}
