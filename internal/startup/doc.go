// Package startup is the common start of the lpu-node daemons: the flags
// they share, declared once (Flags.Declare), parsing the command line
// (internal/cmdline), --help and --version, the config file with the
// flags laid over it, the logger, and tracing failing open (Tracing). What
// a daemon then runs stays in its own packages.
//
// A daemon's main declares its commands and flags, then starts:
//
//	var f startup.Flags
//	var o dra.Options
//	cmd := cmdline.New("")
//	f.Declare(cmd, "config", "root", "state-dir", "metrics-addr", "simulate", "version")
//	cmd.String(&o.NodeName, "node-name", "NODE_NAME", "", "this node's `NAME`").Required()
//	cmd.String(&o.CDIDir, "cdi-dir", "LPU_CDI_DIR", "", "CDI spec `DIR`").Absolute().
//		Sets(func(c *config.Config) { c.CDI.SpecDir = o.CDIDir })
//	p := startup.Program{Name: "lpu-dra", Version: version, Help: help}
//	s, err := p.Start(os.Args[1:], &f, cmd)
//	if s == nil {
//		return err // nil after --help or --version
//	}
//	ctx, stop := startup.Context()
//	defer stop()
//	return dra.Run(ctx, s.Config, o, s.Log)
//
// A logger that is nil means "log nothing" in every package (Logger).
package startup
