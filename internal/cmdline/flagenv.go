package cmdline

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Flag is one command-line flag and its environment twin.
type Flag struct {
	Name  string // flag name, without dashes
	Env   string // environment variable; "" for none
	Usage string // flag usage; a `quoted` word names the value in help
}

// Flags is a command's list of flags, in help order.
type Flags []Flag

// Lookup returns the flag called name, and false when there is none.
func (fl Flags) Lookup(name string) (Flag, bool) {
	for _, f := range fl {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}

// Usage returns the usage of the flag called name, "" when there is none.
func (fl Flags) Usage(name string) string {
	f, _ := fl.Lookup(name)
	return f.Usage
}

// Env returns the environment twin of the flag called name, "" when there
// is none.
func (fl Flags) Env(name string) string {
	f, _ := fl.Lookup(name)
	return f.Env
}

// Given returns the names of the flags set on fs's command line (after
// fs.Parse).
func Given(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// FromEnv sets, through lookupEnv (os.LookupEnv in main), each flag of fl
// that given does not hold from its environment twin, and adds it to
// given. A variable set to "" counts as given (LPU_METRICS_ADDR= disables
// metrics). A nil lookupEnv reads nothing. The error names the variable
// and its value.
func (fl Flags) FromEnv(fs *flag.FlagSet, given map[string]bool, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		return nil
	}
	for _, f := range fl {
		if given[f.Name] || f.Env == "" {
			continue
		}
		v, ok := lookupEnv(f.Env)
		if !ok {
			continue
		}
		if err := fs.Set(f.Name, v); err != nil {
			return fmt.Errorf("environment %s=%q: %v", f.Env, v, err)
		}
		given[f.Name] = true
	}
	return nil
}

// RequireAbsolute checks the flags called names, in order, that given
// holds: each value must be an absolute path. The error names the first
// flag that is not and its value.
func RequireAbsolute(fs *flag.FlagSet, given map[string]bool, names ...string) error {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil || !given[name] {
			continue
		}
		if v := f.Value.String(); !strings.HasPrefix(v, "/") {
			return fmt.Errorf("%s %q: want an absolute path", name, v)
		}
	}
	return nil
}

// PrintFlags writes the help of every flag of fs in name order, two lines
// each: "  --name VALUE" ("  --name" for a boolean) and the usage, followed
// by " [ENV]" for a flag of fl with a twin and by note(name) when note is
// not nil.
func (fl Flags) PrintFlags(w io.Writer, fs *flag.FlagSet, note func(name string) string) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s", f.Name, name, usage)
		if env := fl.Env(f.Name); env != "" {
			fmt.Fprintf(w, " [%s]", env)
		}
		if note != nil {
			fmt.Fprint(w, note(f.Name))
		}
		fmt.Fprintln(w)
	})
}
