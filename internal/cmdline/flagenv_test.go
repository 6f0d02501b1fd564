package cmdline

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

type opts struct {
	Root, Addr, Plain string
	N                 int
}

var testFlags = Flags{
	{Name: "root", Env: "T_ROOT", Usage: "root `DIR`"},
	{Name: "addr", Env: "T_ADDR", Usage: "listen `HOST:PORT`"},
	{Name: "n", Env: "T_N", Usage: "count `N`"},
	{Name: "plain", Usage: "no twin"},
}

func newSet(o *opts) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Root, "root", "/", testFlags.Usage("root"))
	fs.StringVar(&o.Addr, "addr", ":9", testFlags.Usage("addr"))
	fs.IntVar(&o.N, "n", 0, testFlags.Usage("n"))
	fs.StringVar(&o.Plain, "plain", "", testFlags.Usage("plain"))
	return fs
}

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	tests := map[string]struct {
		args      []string
		env       map[string]string
		nilLookup bool
		want      opts
		given     string // names in testFlags order, comma-separated
		wantErr   string
	}{
		"defaults":          {want: opts{Root: "/", Addr: ":9"}},
		"env fills in":      {env: map[string]string{"T_ROOT": "/env", "T_N": "3"}, want: opts{Root: "/env", Addr: ":9", N: 3}, given: "root,n"},
		"flag beats env":    {args: []string{"--root", "/flag"}, env: map[string]string{"T_ROOT": "/env"}, want: opts{Root: "/flag", Addr: ":9"}, given: "root"},
		"empty env counts":  {env: map[string]string{"T_ADDR": ""}, want: opts{Root: "/"}, given: "addr"},
		"flag without twin": {env: map[string]string{"": "x", "PLAIN": "x"}, want: opts{Root: "/", Addr: ":9"}},
		"nil lookup":        {nilLookup: true, want: opts{Root: "/", Addr: ":9"}},
		"bad env value":     {env: map[string]string{"T_N": "many"}, wantErr: `environment T_N="many"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o opts
			fs := newSet(&o)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			given := Given(fs)
			look := lookup(tc.env)
			if tc.nilLookup {
				look = nil
			}
			err := testFlags.FromEnv(fs, given, look)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o != tc.want {
				t.Fatalf("options %+v, want %+v", o, tc.want)
			}
			var names []string
			for _, f := range testFlags {
				if given[f.Name] {
					names = append(names, f.Name)
				}
			}
			if got := strings.Join(names, ","); got != tc.given {
				t.Fatalf("given %q, want %q", got, tc.given)
			}
		})
	}
}

func TestRequireAbsolute(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"default not checked":     {},
		"absolute":                {args: []string{"--root", "/host", "--plain", "/x"}},
		"relative":                {args: []string{"--root", "host"}, wantErr: `root "host": want an absolute path`},
		"empty":                   {args: []string{"--root="}, wantErr: `root "": want an absolute path`},
		"first bad one named":     {args: []string{"--plain", "p", "--root", "r"}, wantErr: `root "r"`},
		"unchecked flag relative": {args: []string{"--addr", "x"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o opts
			fs := newSet(&o)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := RequireAbsolute(fs, Given(fs), "root", "plain", "missing")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestPrintFlags(t *testing.T) {
	var b bytes.Buffer
	testFlags.PrintFlags(&b, newSet(&opts{}), func(name string) string {
		if name == "addr" {
			return " (only: daemon)"
		}
		return ""
	})
	want := "  --addr HOST:PORT\n    \tlisten HOST:PORT [T_ADDR] (only: daemon)\n" +
		"  --n N\n    \tcount N [T_N]\n" +
		"  --plain string\n    \tno twin\n" +
		"  --root DIR\n    \troot DIR [T_ROOT]\n"
	if b.String() != want {
		t.Fatalf("help:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestLookup(t *testing.T) {
	if f, ok := testFlags.Lookup("addr"); !ok || f.Env != "T_ADDR" {
		t.Fatalf("Lookup(addr) = %+v, %v", f, ok)
	}
	if _, ok := testFlags.Lookup("nope"); ok || testFlags.Usage("nope") != "" || testFlags.Env("nope") != "" {
		t.Fatal("unknown flag found")
	}
}
