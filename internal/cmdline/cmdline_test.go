package cmdline

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
)

type opts struct {
	Root, Addr, Plain, Out, Mode string
	N                            int
	V, VGiven                    bool
}

// commands: the program (root, addr, n, plain, mode, v) and "sub run"
// (root, out) and "sub list" (root).
func commands(o *opts) []*Command {
	top := New("")
	top.String(&o.Root, "root", "T_ROOT", "/", "root `DIR`").Absolute().Sets(func(c *config.Config) { c.Root = o.Root })
	top.String(&o.Addr, "addr", "T_ADDR", ":9", "listen `HOST:PORT`")
	top.Int(&o.N, "n", "T_N", 0, "count `N`").Check(func() error {
		if o.N > 3 {
			return errors.New("--n: too many")
		}
		return nil
	})
	top.String(&o.Plain, "plain", "", "", "no twin")
	top.String(&o.Mode, "mode", "T_MODE", "", "`MODE` a|b").OneOf("a", "b")
	top.Bool(&o.V, "v", "", "verbose").MarkGiven(&o.VGiven)
	run := New("sub run")
	run.String(&o.Root, "root", "T_ROOT", "/", "root `DIR`").Absolute()
	run.String(&o.Out, "out", "T_OUT", "", "output `DIR`").Required()
	list := New("sub list")
	list.String(&o.Root, "root", "T_ROOT", "/", "root `DIR`").Absolute()
	return []*Command{top, run, list}
}

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParse(t *testing.T) {
	tests := map[string]struct {
		args      []string
		env       map[string]string
		nilLookup bool
		want      opts
		cmd       string
		given     string // names given, in declaration order
	}{
		"defaults":              {want: opts{Root: "/", Addr: ":9"}},
		"env fills in":          {env: map[string]string{"T_ROOT": "/env", "T_N": "3"}, want: opts{Root: "/env", Addr: ":9", N: 3}, given: "root,n"},
		"flag beats env":        {args: []string{"--root", "/flag"}, env: map[string]string{"T_ROOT": "/env"}, want: opts{Root: "/flag", Addr: ":9"}, given: "root"},
		"empty env counts":      {env: map[string]string{"T_ADDR": ""}, want: opts{Root: "/"}, given: "addr"},
		"flag without twin":     {env: map[string]string{"": "x", "PLAIN": "x"}, want: opts{Root: "/", Addr: ":9"}},
		"nil lookup":            {nilLookup: true, env: map[string]string{"T_ROOT": "/env"}, want: opts{Root: "/", Addr: ":9"}},
		"subcommand":            {args: []string{"sub", "run", "--out", "/o"}, want: opts{Root: "/", Addr: ":9", Out: "/o"}, cmd: "sub run", given: "out"},
		"flags on both sides":   {args: []string{"--root", "/a", "sub", "run", "--out", "/o", "--root", "/b"}, want: opts{Root: "/b", Addr: ":9", Out: "/o"}, cmd: "sub run", given: "root,out"},
		"flag before command":   {args: []string{"--root", "/a", "sub", "list"}, want: opts{Root: "/a", Addr: ":9"}, cmd: "sub list", given: "root"},
		"required from env":     {args: []string{"sub", "run"}, env: map[string]string{"T_OUT": "/e"}, want: opts{Root: "/", Addr: ":9", Out: "/e"}, cmd: "sub run", given: "out"},
		"allowed value":         {args: []string{"--mode", "b"}, want: opts{Root: "/", Addr: ":9", Mode: "b"}, given: "mode"},
		"marked given":          {args: []string{"--v=false"}, want: opts{Root: "/", Addr: ":9", VGiven: true}, given: "v"},
		"default not absolute?": {args: []string{"sub", "list"}, want: opts{Root: "/", Addr: ":9"}, cmd: "sub list"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o opts
			cmds := commands(&o)
			look := lookup(tc.env)
			if tc.nilLookup {
				look = nil
			}
			cmd, err := Parse(tc.args, look, cmds...)
			if err != nil {
				t.Fatal(err)
			}
			if o != tc.want || cmd.Name != tc.cmd {
				t.Fatalf("options %+v command %q, want %+v %q", o, cmd.Name, tc.want, tc.cmd)
			}
			var names []string
			for _, f := range cmd.Flags() {
				if cmd.given[f.Name] {
					names = append(names, f.Name)
				}
			}
			if got := strings.Join(names, ","); got != tc.given {
				t.Fatalf("given %q, want %q", got, tc.given)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		env  map[string]string
		says string
	}{
		"bad env value":          {env: map[string]string{"T_N": "many"}, says: `environment T_N="many"`},
		"relative":               {args: []string{"--root", "host"}, says: `--root "host": want an absolute path`},
		"empty":                  {args: []string{"--root="}, says: `--root "": want an absolute path`},
		"relative in subcommand": {args: []string{"sub", "list", "--root", "r"}, says: `--root "r"`},
		"unchecked relative":     {args: []string{"--addr", "x", "--plain", "p", "--root", "r"}, says: `--root "r"`},
		"check":                  {args: []string{"--n", "4"}, says: "--n: too many"},
		"not allowed":            {args: []string{"--mode", "c"}, says: `--mode "c": want a or b`},
		"not allowed from env":   {env: map[string]string{"T_MODE": "c"}, says: `--mode "c"`},
		"required":               {args: []string{"sub", "run"}, says: "--out is required (or T_OUT)"},
		"unknown flag":           {args: []string{"--frob"}, says: "unknown flag --frob"},
		"flag of another":        {args: []string{"--out", "/x"}, says: "--out is only for sub run"},
		"flag before wrong cmd":  {args: []string{"--addr", ":1", "sub", "list"}, says: "--addr is only for daemon"},
		"unknown command":        {args: []string{"serve"}, says: `unknown command "serve"`},
		"incomplete command":     {args: []string{"sub"}, says: `sub: want "sub run" or "sub list"`},
		"argument after command": {args: []string{"sub", "list", "x"}, says: `unexpected argument "x" after sub list`},
		"bad value":              {args: []string{"--n", "x"}, says: `invalid value "x" for flag --n`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o opts
			_, err := Parse(tc.args, lookup(tc.env), commands(&o)...)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %q", err, tc.says)
			}
		})
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"sub", "--help"}, {"sub", "list", "-h"}} {
		var o opts
		if _, err := Parse(args, nil, commands(&o)...); !errors.Is(err, ErrHelp) {
			t.Errorf("%v: err = %v, want ErrHelp", args, err)
		}
	}
	var o opts
	if _, err := Parse([]string{"x"}, nil, commands(&o)[0]); err == nil || !strings.Contains(err.Error(), `unexpected argument "x"`) {
		t.Errorf("program without commands: err = %v", err)
	}
}

func TestApply(t *testing.T) {
	var o opts
	cmds := commands(&o)
	cmd, err := Parse([]string{"--root", "/flag"}, nil, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	if err := cmd.Apply(c); err != nil || c.Root != "/flag" {
		t.Fatalf("Apply: %v, root %q", err, c.Root)
	}
	c = config.Default()
	c.Root = "/file"
	cmd, _ = Parse(nil, nil, commands(&o)...)
	if err := cmd.Apply(c); err != nil || c.Root != "/file" {
		t.Fatalf("Apply without the flag: %v, root %q", err, c.Root)
	}
	c.ResourceName = "not a name"
	if err := cmd.Apply(c); err == nil || !strings.Contains(err.Error(), "config after flags") {
		t.Fatalf("Apply of an invalid config: %v", err)
	}
}

func TestPrintFlags(t *testing.T) {
	var b bytes.Buffer
	var o opts
	cmds := commands(&o)
	PrintFlags(&b, cmds[0], cmds[2])
	want := "  --addr HOST:PORT\n    \tlisten HOST:PORT [T_ADDR] (only: daemon)\n" +
		"  --mode MODE\n    \tMODE a|b [T_MODE] (only: daemon)\n" +
		"  --n N\n    \tcount N [T_N] (only: daemon)\n" +
		"  --plain string\n    \tno twin (only: daemon)\n" +
		"  --root DIR\n    \troot DIR [T_ROOT]\n" +
		"  --v\n    \tverbose (only: daemon)\n"
	if b.String() != want {
		t.Fatalf("help:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestLookup(t *testing.T) {
	var o opts
	top := commands(&o)[0]
	if f := top.Lookup("addr"); f == nil || f.Env != "T_ADDR" {
		t.Fatalf("Lookup(addr) = %+v", f)
	}
	if top.Lookup("out") != nil {
		t.Fatal("the program has its subcommand's flag")
	}
}
