package devcgroup

import "testing"

// rulesFrom decodes 4 bytes per rule over a small number space, so fuzzed
// rules collide on majors and minors.
func rulesFrom(b []byte) []Rule {
	types := [...]string{"", "a", "c", "b", "u", "x"}
	var rules []Rule
	for len(b) >= 4 {
		f, maj, mnr, acc := b[0], int64(b[1]%4), int64(b[2]%4), b[3]
		r := Rule{Allow: f&1 != 0, Type: types[int(f>>1)%len(types)], Access: Access(acc & 7).String()}
		if f&0x40 == 0 {
			r.Major = &maj
		}
		if f&0x80 == 0 {
			r.Minor = &mnr
		}
		rules = append(rules, r)
		b = b[4:]
	}
	return rules
}

// FuzzAdmitted checks the evaluation's invariants on arbitrary rule lists:
// a deny-all last admits nothing, an allow-all last admits everything, an
// exact allow last admits the device, block rules never matter to a char
// device, the rules ForMajors keeps answer the same, and AdmitsOther
// agrees with asking every minor.
func FuzzAdmitted(f *testing.F) {
	f.Add([]byte{0x00, 0, 0, 7, 0x05, 1, 2, 3}, int64(1), int64(2))
	f.Add([]byte{0x03, 0, 0, 7, 0x04, 1, 0, 7, 0x85, 1, 0, 7}, int64(1), int64(3))
	f.Add([]byte{0x05, 1, 0, 7, 0x84, 1, 0, 7, 0x04, 1, 3, 7}, int64(1), int64(3))
	f.Fuzz(func(t *testing.T, b []byte, major, minor int64) {
		major, minor = major&3, minor&3
		if len(b) > 4*64 {
			b = b[:4*64] // enough rules to collide; TestManyRules covers long lists
		}
		rules := rulesFrom(b)
		got := Admitted(rules, major, minor)
		if got&^All != 0 {
			t.Fatalf("Admitted = %b: bits outside rwm", got)
		}
		if a := Admitted(append(rules[:len(rules):len(rules)], Rule{Allow: false, Type: "a", Access: "rwm"}), major, minor); a != 0 {
			t.Fatalf("deny-all last admits %q", a)
		}
		if a := Admitted(append(rules[:len(rules):len(rules)], Rule{Allow: true, Access: "rwm"}), major, minor); a != All {
			t.Fatalf("allow-all last admits %q", a)
		}
		if a := Admitted(append(rules[:len(rules):len(rules)], Rule{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "r"}), major, minor); a&Read == 0 {
			t.Fatalf("exact allow last admits %q", a)
		}
		block := Rule{Allow: true, Type: "b", Major: &major, Minor: &minor, Access: "rwm"}
		if a := Admitted(append([]Rule{block}, append(rules[:len(rules):len(rules)], block)...), major, minor); a != got {
			t.Fatalf("block rules changed the answer: %q, was %q", a, got)
		}
		if a := Admitted(ForMajors(rules, []int64{major}, nil), major, minor); a != got {
			t.Fatalf("on the rules for major %d: %q, on all: %q", major, a, got)
		}
		except := []int64{minor}
		m, ok := AdmitsOther(rules, major, except)
		if ok && (m == minor || Admitted(rules, major, m) == 0) {
			t.Fatalf("AdmitsOther = %d, which is excepted or not admitted", m)
		}
		// Minors 0..3 are the only named ones; 4..9 stand for the rest.
		for x := int64(0); x < 10; x++ {
			if x != minor && Admitted(rules, major, x) != 0 && !ok {
				t.Fatalf("minor %d admitted, AdmitsOther says none", x)
			}
		}
	})
}
