package config

import (
	"slices"
	"strings"
	"testing"
)

func TestSecurity(t *testing.T) {
	d := Default().Security
	if d.AuditInterval.Duration != DefaultAuditInterval || !slices.Equal(d.AllowNamespaces, DefaultAllowNamespaces) {
		t.Errorf("defaults %+v", d)
	}
	tests := map[string]struct {
		yaml    string
		wantErr string
		check   func(*Config) bool
	}{
		"empty allowlist": {yaml: "security:\n  allowNamespaces: []\n", check: func(c *Config) bool { return len(c.Security.AllowNamespaces) == 0 }},
		"audit too often": {yaml: "security:\n  auditInterval: 10ms\n", wantErr: `security.auditInterval: "10ms" must be at least 1s`},
		"bad namespace":   {yaml: "security:\n  allowNamespaces: [kube-system, Bad_NS]\n", wantErr: `security.allowNamespaces[1]: "Bad_NS" is not a namespace name`},
		"unknown field":   {yaml: "security:\n  acceptLegacy: true\n", wantErr: "acceptLegacy"},
		// v1 seals are refused whatever the config says: the old switch
		// fails the load, naming itself, rather than being ignored.
		"removed legacy switch": {yaml: "security:\n  acceptLegacySeals: false\n", wantErr: "security.acceptLegacySeals: unknown field"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte("version: v1\n" + tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Parse = %+v, %v", c, err)
			}
		})
	}
}
