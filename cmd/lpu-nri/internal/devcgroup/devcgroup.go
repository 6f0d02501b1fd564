package devcgroup

import (
	"slices"
	"strings"
)

// Access is a set of device cgroup permissions.
type Access uint8

// The permissions of a rule's access string: r, w, m.
const (
	Read  Access = 1 << iota // r: open for reading
	Write                    // w: open for writing
	Mknod                    // m: mknod(2)
	All   = Read | Write | Mknod
)

// String returns the access string ("rwm", "" for none).
func (a Access) String() string {
	var b strings.Builder
	for i, c := range "rwm" {
		if a&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// ParseAccess returns the permissions an access string names; other
// letters are ignored.
func ParseAccess(s string) Access {
	var a Access
	for _, c := range s {
		switch c {
		case 'r':
			a |= Read
		case 'w':
			a |= Write
		case 'm':
			a |= Mknod
		}
	}
	return a
}

// Rule is one device cgroup rule, as in OCI linux.resources.devices.
type Rule struct {
	Allow bool
	// Type is "a" or "" (every device), "c" (char), "b" (block); "u"
	// (unbuffered char) counts as "c". Another type counts as "a" in an
	// allow rule and is ignored in a deny rule (runc refuses both).
	Type         string
	Major, Minor *int64 // nil: any
	// Access is the rule's permissions; empty in an allow rule means all
	// (runc would admit nothing, a kernel could differ: assume the worst).
	Access string
}

// kind is a rule's device type after the aliases: 'a', 'c' or 'b'.
func (r Rule) kind() byte {
	switch r.Type {
	case "c", "u":
		return 'c'
	case "b":
		return 'b'
	case "", "a":
		return 'a'
	}
	if r.Allow {
		return 'a'
	}
	return 0 // ignored
}

func (r Rule) access() Access {
	a := ParseAccess(r.Access)
	if a == 0 && r.Allow {
		return All
	}
	return a
}

// wildcard is the number a nil major or minor stands for in an exception.
const wildcard = -1

func number(p *int64) int64 {
	if p == nil || *p < 0 {
		return wildcard
	}
	return *p
}

// matches reports whether a char rule's numbers match major:minor.
func (r Rule) matches(major, minor int64) bool {
	maj, mnr := number(r.Major), number(r.Minor)
	return (maj == wildcard || maj == major) && (mnr == wildcard || mnr == minor)
}

// MaxRules bounds the rules Admitted judges: more admit everything (a
// spec's rules number a few dozen; a caller that refuses what is admitted
// then refuses rather than spends time on an abnormal list).
const MaxRules = 1024

// Admitted returns the accesses rules admit to the character device
// major:minor: the union of what the cgroup v1 exception list and a
// last-matching-rule-wins filter admit (package doc).
func Admitted(rules []Rule, major, minor int64) Access {
	if len(rules) > MaxRules {
		return All
	}
	return exceptions(rules, major, minor) | lastWins(rules, major, minor)
}

// exception is one cgroup v1 exception: exact type and numbers (either a
// wildcard) and the access it grants against the default policy.
type exception struct {
	major, minor int64
	access       Access
}

// matching is the exception's access when it matches major:minor, else 0.
func (e exception) matching(major, minor int64) Access {
	if (e.major == wildcard || e.major == major) && (e.minor == wildcard || e.minor == minor) {
		return e.access
	}
	return 0
}

// exceptions evaluates rules as cgroup v1 does: a default policy and a list
// of exceptions keyed by exact type and numbers; a rule against the policy
// adds its access to its key, a rule with the policy removes it from that
// key only.
func exceptions(rules []Rule, major, minor int64) Access {
	allowAll := false
	var buf [16]exception // a handful of rules: a slice beats a map
	ex := buf[:0]
	var index map[[2]int64]int // past len(buf) exceptions, their positions
	find := func(maj, mnr int64) int {
		if index != nil {
			if i, ok := index[[2]int64{maj, mnr}]; ok {
				return i
			}
			return -1
		}
		return slices.IndexFunc(ex, func(e exception) bool { return e.major == maj && e.minor == mnr })
	}
	for _, r := range rules {
		switch r.kind() {
		case 'a':
			allowAll = r.Allow
			ex = ex[:0]
			clear(index)
			continue
		case 'c':
		default:
			continue // block devices never match a char device
		}
		maj, mnr := number(r.Major), number(r.Minor)
		i := find(maj, mnr)
		switch {
		case r.Allow != allowAll && i < 0:
			ex = append(ex, exception{maj, mnr, r.access()})
			if index == nil && len(ex) > len(buf) {
				index = make(map[[2]int64]int, 2*len(ex))
				for j, e := range ex {
					index[[2]int64{e.major, e.minor}] = j
				}
			} else if index != nil {
				index[[2]int64{maj, mnr}] = len(ex) - 1
			}
		case r.Allow != allowAll:
			ex[i].access |= r.access()
		case i >= 0:
			ex[i].access &^= r.access() // an empty exception matches nothing
		}
	}
	var matching Access
	for _, e := range ex {
		matching |= e.matching(major, minor)
	}
	if allowAll {
		return All &^ matching // a deny exception matching an access denies it
	}
	return matching
}

// lastWins evaluates rules as the eBPF device filters do: for each access,
// the last rule matching the device and naming that access decides; none
// denies.
func lastWins(rules []Rule, major, minor int64) Access {
	var admitted Access
	for _, bit := range [...]Access{Read, Write, Mknod} {
		for i := len(rules) - 1; i >= 0; i-- {
			r := rules[i]
			k := r.kind()
			if k != 'a' && (k != 'c' || !r.matches(major, minor)) {
				continue
			}
			if r.access()&bit == 0 {
				continue
			}
			if r.Allow {
				admitted |= bit
			}
			break
		}
	}
	return admitted
}

// ForMajors returns the rules that can matter to a char device of one of
// majors, appended to buf: resets, and char rules of a wildcard major or
// one of majors. Admitted answers the same on them for those devices, and
// a spec's rules for other devices (containerd's standard ones) drop out.
func ForMajors(rules []Rule, majors []int64, buf []Rule) []Rule {
	for _, r := range rules {
		switch r.kind() {
		case 'a':
		case 'c':
			if m := number(r.Major); m != wildcard && !slices.Contains(majors, m) {
				continue
			}
		default:
			continue
		}
		buf = append(buf, r)
	}
	return buf
}

// AdmitsOther returns a minor of major outside except to which rules admit
// some access, and whether there is one. The rules treat every minor they
// do not name alike, so it tries the minors they name and one they do not.
func AdmitsOther(rules []Rule, major int64, except []int64) (int64, bool) {
	if len(rules) > MaxRules {
		m := int64(0)
		for slices.Contains(except, m) {
			m++
		}
		return m, true
	}
	skip := make(map[int64]bool, len(except))
	for _, m := range except {
		skip[m] = true
	}
	named := map[int64]bool{}
	for _, r := range rules {
		if r.kind() != 'c' || r.Minor == nil || *r.Minor < 0 {
			continue
		}
		if m := number(r.Major); m != wildcard && m != major {
			continue // never matches a device of major
		}
		if m := *r.Minor; !skip[m] && !named[m] {
			named[m] = true
			if Admitted(rules, major, m) != 0 {
				return m, true
			}
		}
	}
	// A minor neither named nor excepted: at most len(named)+len(skip)
	// candidates are taken.
	m := int64(0)
	for named[m] || skip[m] {
		m++
	}
	if Admitted(rules, major, m) != 0 {
		return m, true
	}
	return 0, false
}
