// Package cli parses lpu-nri's command line: global flags, the commands
// (cdi generate, cdi list, doctor), the flags' environment twins, and
// applies them over the config file (flag > environment > file > default).
//
//	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
//	cfg, err := config.Load(opts.ConfigFile)
//	err = opts.Apply(cfg)
package cli
