package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hyperaccel/lpu-node/config"
)

// ErrHelp is returned by Parse for --help or -h: print the help, exit 0.
var ErrHelp = flag.ErrHelp

// Command is one command of a program ("" for the daemon itself, or a
// subcommand such as "cdi generate") with its own flag set.
type Command struct {
	Name  string // command words after the program name; "" for the program
	fs    *flag.FlagSet
	flags []*Flag
	given map[string]bool
}

// Flag is one declared flag: its name, environment twin, usage and the
// checks and config override that go with it.
type Flag struct {
	Name    string // without dashes
	Env     string // environment twin; "" for none
	Usage   string // a `quoted` word names the value in help
	abs     bool
	req     bool
	check   func() error
	allowed []string
	mark    *bool
	apply   func(*config.Config)
	exits   bool
}

// New returns the command called name (words after the program's name,
// "" for the program itself).
func New(name string) *Command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Command{Name: name, fs: fs}
}

func (c *Command) add(name, env, usage string) *Flag {
	f := &Flag{Name: name, Env: env, Usage: usage}
	c.flags = append(c.flags, f)
	return f
}

// String declares a string flag writing to dst.
func (c *Command) String(dst *string, name, env, def, usage string) *Flag {
	c.fs.StringVar(dst, name, def, usage)
	return c.add(name, env, usage)
}

// Int declares an int flag writing to dst.
func (c *Command) Int(dst *int, name, env string, def int, usage string) *Flag {
	c.fs.IntVar(dst, name, def, usage)
	return c.add(name, env, usage)
}

// Bool declares a boolean flag writing to dst.
func (c *Command) Bool(dst *bool, name, env, usage string) *Flag {
	c.fs.BoolVar(dst, name, false, usage)
	return c.add(name, env, usage)
}

// Absolute makes a given value that is not an absolute path an error.
func (f *Flag) Absolute() *Flag { f.abs = true; return f }

// Required makes a flag that is given neither on the command line nor in
// the environment an error.
func (f *Flag) Required() *Flag { f.req = true; return f }

// Exits marks a flag that answers and ends the program (--version): when it
// is given, required flags may be missing.
func (f *Flag) Exits() *Flag { f.exits = true; return f }

// Check runs fn once after parsing when the flag was given; its error
// should name the flag and the value.
func (f *Flag) Check(fn func() error) *Flag { f.check = fn; return f }

// OneOf makes a given value outside allowed an error naming the flag, the
// value and what is allowed.
func (f *Flag) OneOf(allowed ...string) *Flag {
	f.allowed = allowed
	return f
}

// MarkGiven sets *p to whether the flag or its twin was given, for a value
// whose default depends on other flags.
func (f *Flag) MarkGiven(p *bool) *Flag { f.mark = p; return f }

// Sets makes the flag override the config file: Apply calls fn when the
// flag or its twin was given.
func (f *Flag) Sets(fn func(*config.Config)) *Flag { f.apply = fn; return f }

// Flags returns the command's flags in declaration order.
func (c *Command) Flags() []*Flag { return slices.Clone(c.flags) }

// Lookup returns the flag called name, nil when the command has none.
func (c *Command) Lookup(name string) *Flag {
	for _, f := range c.flags {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Apply overrides the fields of cfg whose flags were given, then validates
// cfg.
func (c *Command) Apply(cfg *config.Config) error {
	for _, f := range c.flags {
		if f.apply != nil && c.given[f.Name] {
			f.apply(cfg)
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config after flags: %w", err)
	}
	return nil
}

// Parse reads args (without the program name) against cmds, of which the
// first is the program's own command and the others its subcommands: the
// flags of the first, then the words of a subcommand and its flags, then
// the environment twins of the chosen command's flags not given, through
// lookupEnv (os.LookupEnv in main; nil reads nothing). A variable set to ""
// counts as given (LPU_METRICS_ADDR= disables metrics). Each error is one
// line naming the flag and its value. It returns the chosen command.
func Parse(args []string, lookupEnv func(string) (string, bool), cmds ...*Command) (*Command, error) {
	top := cmds[0]
	if err := top.parse(args, cmds); err != nil {
		return nil, err
	}
	cmd, rest, err := pick(top.fs.Args(), cmds)
	if err != nil {
		return nil, err
	}
	if cmd != top {
		for name := range top.given {
			if cmd.Lookup(name) == nil {
				return nil, onlyFor(name, cmds)
			}
		}
		if err := cmd.parse(rest, cmds); err != nil {
			return nil, err
		}
		if cmd.fs.NArg() > 0 {
			return nil, fmt.Errorf("unexpected argument %q after %s", cmd.fs.Arg(0), cmd.Name)
		}
		for name := range top.given {
			cmd.given[name] = true
		}
	} else if top.fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only)", top.fs.Arg(0))
	}
	if err := cmd.finish(lookupEnv); err != nil {
		return nil, err
	}
	return cmd, nil
}

// parse parses args into c's flag set and records the flags given.
func (c *Command) parse(args []string, cmds []*Command) error {
	err := c.fs.Parse(args)
	c.given = map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return ErrHelp
	}
	// The flag package says "flag provided but not defined: -x"; name the
	// commands that do take it.
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		for _, o := range cmds {
			if o.Lookup(name) != nil {
				return onlyFor(name, cmds)
			}
		}
		return fmt.Errorf("unknown flag --%s", name)
	}
	return errors.New(strings.Replace(err.Error(), " -", " --", 1))
}

// pick returns the command named by the leading words of args (cmds[0]
// when there are none) and the args after them.
func pick(args []string, cmds []*Command) (*Command, []string, error) {
	if len(args) == 0 || len(cmds) == 1 {
		return cmds[0], args, nil
	}
	var near []string
	for _, c := range cmds[1:] {
		words := strings.Fields(c.Name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return c, args[len(words):], nil
		}
		if words[0] == args[0] {
			near = append(near, strconv(c.Name))
		}
	}
	if len(near) == 0 {
		return nil, nil, fmt.Errorf("unknown command %q", args[0])
	}
	if len(args) > 1 && (args[1] == "-h" || args[1] == "-help" || args[1] == "--help") {
		return nil, nil, ErrHelp
	}
	return nil, nil, fmt.Errorf("%s: want %s", args[0], orList(near))
}

func strconv(s string) string { return `"` + s + `"` }

// onlyFor says which commands take the flag called name.
func onlyFor(name string, cmds []*Command) error {
	var names []string
	for _, c := range cmds {
		if c.Lookup(name) != nil {
			names = append(names, label(c))
		}
	}
	return fmt.Errorf("--%s is only for %s", name, strings.Join(names, ", "))
}

func label(c *Command) string {
	if c.Name == "" {
		return "daemon"
	}
	return c.Name
}

// finish reads the environment twins, then checks the values once.
func (c *Command) finish(lookupEnv func(string) (string, bool)) error {
	if err := c.readEnv(lookupEnv); err != nil {
		return err
	}
	exiting := false
	for _, f := range c.flags {
		exiting = exiting || (f.exits && c.given[f.Name])
	}
	for _, f := range c.flags {
		if f.mark != nil {
			*f.mark = c.given[f.Name]
		}
		if err := c.check(f, exiting); err != nil {
			return err
		}
	}
	return nil
}

// readEnv sets each flag not given on the command line from its twin, when
// the environment has it.
func (c *Command) readEnv(lookupEnv func(string) (string, bool)) error {
	for _, f := range c.flags {
		if c.given[f.Name] || f.Env == "" || lookupEnv == nil {
			continue
		}
		v, ok := lookupEnv(f.Env)
		if !ok {
			continue
		}
		if err := c.fs.Set(f.Name, v); err != nil {
			return fmt.Errorf("environment %s=%q: %v", f.Env, v, err)
		}
		c.given[f.Name] = true
	}
	return nil
}

// check applies f's checks to its value: required (unless a flag that
// exits was given), absolute, one of, its own check.
func (c *Command) check(f *Flag, exiting bool) error {
	v := c.fs.Lookup(f.Name).Value.String()
	switch {
	case f.req && !c.given[f.Name] && !exiting:
		return fmt.Errorf("--%s is required%s", f.Name, envHint(f))
	case f.abs && c.given[f.Name] && !strings.HasPrefix(v, "/"):
		return fmt.Errorf("--%s %q: want an absolute path", f.Name, v)
	case c.given[f.Name] && f.allowed != nil && !slices.Contains(f.allowed, v):
		return fmt.Errorf("--%s %q: want %s", f.Name, v, orList(f.allowed))
	case c.given[f.Name] && f.check != nil:
		return f.check()
	}
	return nil
}

func envHint(f *Flag) string {
	if f.Env == "" {
		return ""
	}
	return " (or " + f.Env + ")"
}

// orList joins words as "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// PrintFlags writes the help of the flags of cmds in name order, two lines
// each: "  --name VALUE" ("  --name" for a boolean) and the usage, then
// " [ENV]" for a flag with a twin and " (only: ...)" for a flag that not
// every command takes.
func PrintFlags(w io.Writer, cmds ...*Command) {
	seen := map[string]bool{}
	var all []*flag.Flag
	var twin = map[string]string{}
	for _, c := range cmds {
		c.fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				seen[f.Name] = true
				all = append(all, f)
			}
		})
		for _, f := range c.Flags() {
			twin[f.Name] = f.Env
		}
	}
	slices.SortFunc(all, func(a, b *flag.Flag) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range all {
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s", f.Name, name, usage)
		if env := twin[f.Name]; env != "" {
			fmt.Fprintf(w, " [%s]", env)
		}
		if len(cmds) > 1 {
			var in []string
			for _, c := range cmds {
				if c.Lookup(f.Name) != nil {
					in = append(in, label(c))
				}
			}
			if len(in) < len(cmds) {
				fmt.Fprintf(w, " (only: %s)", strings.Join(in, ", "))
			}
		}
		fmt.Fprintln(w)
	}
}
