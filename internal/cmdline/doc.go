// Package cmdline is the daemons' command line: each flag is declared once
// with its name, environment twin, default, usage and destination, and
// with what goes with it (an absolute path, allowed values, a check, the
// config field it overrides). Every command and subcommand has its own
// flag set; Parse picks the command from the words after the program's
// flags. Precedence: flag > environment > config file > default.
//
//	top := cmdline.New("")                       // the program itself
//	top.String(&o.Mode, "mode", "LPU_MODE", "", "`MODE` nri|cdi").
//		OneOf("nri", "cdi").Sets(func(c *config.Config) { c.Injection.Mode = o.Mode })
//	gen := cmdline.New("cdi generate")           // lpu-nri cdi generate
//	gen.String(&o.Out, "output", "LPU_CDI_OUTPUT", "", "spec `DIR`").Absolute()
//	cmd, err := cmdline.Parse(os.Args[1:], os.LookupEnv, top, gen)
//	...
//	err = cmd.Apply(cfg)                         // given flags over the file
//
// Errors are one line naming the flag and its value. The flags the daemons
// share (--root, --state-dir, ...) are declared once in internal/startup.
package cmdline
