// Package config owns the node configuration both daemons read: one
// versioned YAML file (version: v1), its defaults, and its validation.
//
// Load("") returns Default(), which works on a standard node with no file.
// A file only needs "version: v1"; every field it leaves out keeps its
// default (see the Default* constants and example.yaml, which lists every
// field). Unknown fields, wrong types and invalid values are errors that
// name the YAML field path, the value and what is allowed; Load reports all
// of them at once:
//
//	cfg, err := config.Load("/etc/lpu/config.yaml")
//	if err != nil {
//		return fmt.Errorf("load config: %w", err)
//	}
//	// config /etc/lpu/config.yaml: allocation.policy: "fast" is not allowed (allowed: best-effort, strict)
//
// Flags are for plumbing only (config path, root, state dir). Log level and format
// may also come from LPU_LOG_LEVEL / LPU_LOG_FORMAT; NewLogger applies env
// over file over defaults and turns invalid values into warnings instead of
// errors, so a typo in a log setting never stops a daemon.
package config
