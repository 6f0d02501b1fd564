// Package cmdline gives the flags of a standard flag.FlagSet environment
// twins (--root and LPU_ROOT) with the precedence flag > environment >
// config file > default, and writes flag help that names each twin. The
// flag set, its flags and the help text around them stay with each
// command; this package holds only the plumbing they share.
//
//	flags := cmdline.Flags{{Name: "root", Env: "LPU_ROOT", Usage: "host root `DIR`"}}
//	fs := flag.NewFlagSet("lpu-x", flag.ContinueOnError)
//	fs.StringVar(&o.Root, "root", "", flags.Usage("root"))
//	if err := fs.Parse(args); err != nil { ... }
//	given := cmdline.Given(fs)                          // from the command line
//	err := flags.FromEnv(fs, given, os.LookupEnv)       // then from the environment
//	err = cmdline.RequireAbsolute(fs, given, "root")    // paths must be absolute
//	if given["root"] { cfg.Root = o.Root }              // and only then over the file
package cmdline
