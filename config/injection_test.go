package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

func TestResolveInjection(t *testing.T) {
	dir := daemontest.ShortDir(t)
	sock := filepath.Join(dir, "nri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct{ mode, socket, want, why string }{
		"auto with socket":      {InjectionAuto, sock, InjectionNRI, "exists"},
		"auto without socket":   {InjectionAuto, filepath.Join(dir, "absent"), InjectionCDI, "no NRI socket"},
		"auto with plain file":  {InjectionAuto, plain, InjectionCDI, "no NRI socket"},
		"nri forced, no socket": {InjectionNRI, filepath.Join(dir, "absent"), InjectionNRI, "configured"},
		"cdi forced, socket":    {InjectionCDI, sock, InjectionCDI, "configured"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, why := ResolveInjection(tc.mode, tc.socket)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("ResolveInjection(%q, %q) = %q (%s), want %q (%s)", tc.mode, tc.socket, got, why, tc.want, tc.why)
			}
		})
	}
}
