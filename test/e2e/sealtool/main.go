// Command sealtool writes lpu.hyperaccel.ai/* allocation annotations the way
// a hostile tenant (or a stolen key) would, for the e2e security scenarios:
// sealed with the node's real key for this node, for another node, in the
// legacy v1 form, or with a key of its own. It prints them as one JSON
// object, ready for a CRI container config or a pod manifest. Only the e2e
// uses it.
//
//	sealtool --state-dir /tmp/lpu-e2e.x/state lpu2 lpu3                 # valid here
//	sealtool --state-dir ... --node other-node lpu2 lpu3               # cross-node
//	sealtool --state-dir ... --legacy lpu2 lpu3                        # v1, no node
//	sealtool --random-key lpu2 lpu3                                    # another key
package main

import (
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sealtool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sealtool", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "state `DIR` holding the node's seal.key (never created here)")
	node := fs.String("node", "", "node `NAME` to bind the seal to (default NODE_NAME, else the host name, as the daemons do)")
	legacy := fs.Bool("legacy", false, "write the v1 form (no node binding) with an allocation ID")
	randomKey := fs.Bool("random-key", false, "seal with a fresh random key instead of the node's")
	id := fs.String("id", "", "allocation `ID` (default a fresh random one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no LPU IDs given")
	}
	key, err := loadKey(*stateDir, *randomKey)
	if err != nil {
		return err
	}
	allocID := *id
	if allocID == "" {
		allocID = inject.NewAllocationID()
	}
	var ann map[string]string
	if *legacy {
		ann, err = key.AnnotationsV1WithID(fs.Args(), allocID)
	} else {
		name := *node
		if name == "" {
			if name, err = inject.NodeName(os.Getenv); err != nil {
				return err
			}
		}
		if key, err = key.ForNode(name); err != nil {
			return err
		}
		ann, err = key.AnnotationsWithID(fs.Args(), allocID)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(ann)
}

// loadKey reads the node's key, refusing to create one: a missing key means
// the node is not up, and a key made here would seal nothing the daemons open.
// It is an injecttest key: the v1 form has no production writer.
func loadKey(stateDir string, random bool) (*injecttest.Key, error) {
	if random {
		b := make([]byte, inject.KeySize)
		_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
		return injecttest.NewKey(b)
	}
	if stateDir == "" {
		return nil, fmt.Errorf("--state-dir is required without --random-key")
	}
	k, err := inject.LoadKey(stateDir) // the daemons' checks of file and dir
	if err != nil {
		return nil, err
	}
	secret, err := os.ReadFile(k.Path())
	if err != nil {
		return nil, fmt.Errorf("read seal key %s: %w", k.Path(), err)
	}
	return injecttest.NewKey(secret)
}
