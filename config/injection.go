package config

import (
	"io/fs"
	"os"
)

// ResolveInjection turns a configured injection mode into nri or cdi and
// says why. "auto" picks nri when nriSocket is a unix socket (the runtime
// serves NRI), else cdi. Both daemons call this one rule, so they cannot
// disagree on the mode: a device plugin in nri mode would hand out
// annotations nobody injects, one in cdi mode CDI names an NRI runtime may
// not resolve.
func ResolveInjection(mode, nriSocket string) (resolved, reason string) {
	switch mode {
	case InjectionNRI, InjectionCDI:
		return mode, mode + " (configured)"
	}
	if fi, err := os.Stat(nriSocket); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		return InjectionNRI, "nri (auto: NRI socket " + nriSocket + " exists)"
	}
	return InjectionCDI, "cdi (auto: no NRI socket at " + nriSocket + ")"
}
